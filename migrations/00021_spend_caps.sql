-- +goose Up

-- Spend caps per account and period (issue 31). A run is charged to an
-- account ("acme/support"); accounts nest by path, so a call charged to
-- acme/support must fit every cap of acme/support and of acme. A cap is
-- USD per calendar hour, day or month in a stated time zone (UTC by
-- default). Operators set caps; every change is kept, with who made it.
--
-- A call reserves its most expensive outcome before it is sent, and is
-- settled to what it cost once it answers: the sum of what is spent and
-- what is reserved in a period never passes its cap, because the check
-- and the reservation are one step under the period rows' locks, taken
-- in one order (account, then period) so that two reservations of one
-- account tree never deadlock.
CREATE TABLE spend_caps (
    account      text NOT NULL CHECK (account <> ''),
    period       text NOT NULL CHECK (period IN ('hour', 'day', 'month')),
    time_zone    text NOT NULL DEFAULT 'UTC',
    usd          numeric NOT NULL CHECK (usd >= 0),
    on_exhausted text NOT NULL DEFAULT 'finish' CHECK (on_exhausted IN ('finish', 'wait', 'escalate')),
    -- The share of the cap only finishing turns may use: a run the cap
    -- stops can still pay for its partial answer and handoff note.
    finish_reserve numeric NOT NULL DEFAULT 0 CHECK (finish_reserve >= 0 AND finish_reserve < 1),
    updated_by   text NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (account, period)
);

-- Every change to a cap: who, when, what it was (null: none) and what it
-- became (null: removed).
CREATE TABLE spend_cap_changes (
    id         bigserial PRIMARY KEY,
    account    text NOT NULL,
    period     text NOT NULL,
    old        jsonb,
    new        jsonb,
    changed_by text NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- What a cap's period holds: spent (settled) and reserved (held by calls
-- in flight). One row per account, period and period start.
CREATE TABLE spend_periods (
    account  text NOT NULL,
    period   text NOT NULL,
    starts   timestamptz NOT NULL,
    resets   timestamptz NOT NULL,
    spent    numeric NOT NULL DEFAULT 0,
    reserved numeric NOT NULL DEFAULT 0,
    PRIMARY KEY (account, period, starts)
);

-- A call's reservation, by its idempotency key, until it is settled or
-- released: the amount, and the period rows it holds it in.
CREATE TABLE spend_holds (
    idempotency_key text PRIMARY KEY,
    account         text NOT NULL,
    usd             numeric NOT NULL,
    accounts        text[] NOT NULL,
    periods         text[] NOT NULL,
    starts          timestamptz[] NOT NULL,
    held_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_until     timestamptz NOT NULL
);
CREATE INDEX spend_holds_by_lease ON spend_holds (lease_until);

-- What each call charged to an account cost, by its idempotency key, as
-- its settle recorded it: the spend report attributes it by account,
-- model (the key's action) and day. A key settled again (a turn whose
-- failed attempt gave its reservation back, then answered) adds to its
-- row.
CREATE TABLE spend_entries (
    idempotency_key text PRIMARY KEY,
    account         text NOT NULL,
    usd             numeric NOT NULL,
    settled_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX spend_entries_by_time ON spend_entries (settled_at);

-- +goose StatementBegin
-- The period of a cap that holds p_at: its start and the next one's, in
-- the cap's time zone (a local day is 23 or 25 hours across a DST change).
CREATE FUNCTION agentsaga_spend_period(p_period text, p_time_zone text, p_at timestamptz)
RETURNS TABLE (starts timestamptz, resets timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT date_trunc(p_period, p_at AT TIME ZONE p_time_zone) AT TIME ZONE p_time_zone,
           (date_trunc(p_period, p_at AT TIME ZONE p_time_zone) + ('1 ' || p_period)::interval) AT TIME ZONE p_time_zone
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The accounts a call of p_account is charged to: itself and each parent
-- by path, the outermost first ("acme", "acme/support").
CREATE FUNCTION agentsaga_spend_accounts(p_account text)
RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(array_to_string(parts[1:n], '/') ORDER BY n), '{}')
    FROM (SELECT string_to_array(p_account, '/') AS parts) p, generate_series(1, cardinality(p.parts)) AS n
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Sets a cap (p_usd not null) or removes it (null), and records the
-- change. Returns the cap as it was (null when there was none).
CREATE FUNCTION agentsaga_spend_set_cap(p_account text, p_period text, p_time_zone text, p_usd numeric,
                                        p_on_exhausted text, p_finish_reserve numeric, p_by text)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_old jsonb;
    v_new jsonb;
BEGIN
    PERFORM clock_timestamp() AT TIME ZONE p_time_zone; -- an unknown zone fails here
    SELECT jsonb_build_object('usd', c.usd, 'time_zone', c.time_zone, 'on_exhausted', c.on_exhausted,
                              'finish_reserve', c.finish_reserve) INTO v_old
    FROM spend_caps c WHERE c.account = p_account AND c.period = p_period FOR UPDATE;
    IF p_usd IS NULL THEN
        DELETE FROM spend_caps c WHERE c.account = p_account AND c.period = p_period;
    ELSE
        INSERT INTO spend_caps (account, period, time_zone, usd, on_exhausted, finish_reserve, updated_by)
        VALUES (p_account, p_period, p_time_zone, p_usd, p_on_exhausted, p_finish_reserve, p_by)
        ON CONFLICT (account, period) DO UPDATE
        SET time_zone = excluded.time_zone, usd = excluded.usd, on_exhausted = excluded.on_exhausted,
            finish_reserve = excluded.finish_reserve, updated_by = excluded.updated_by, updated_at = clock_timestamp();
        v_new := jsonb_build_object('usd', p_usd, 'time_zone', p_time_zone, 'on_exhausted', p_on_exhausted,
                                    'finish_reserve', p_finish_reserve);
    END IF;
    IF v_old IS DISTINCT FROM v_new THEN
        INSERT INTO spend_cap_changes (account, period, old, new, changed_by) VALUES (p_account, p_period, v_old, v_new, p_by);
    END IF;
    RETURN v_old;
END
$$;
-- +goose StatementEnd


-- +goose StatementBegin
-- Settles the call p_key to what it cost (p_usd; 0 releases it): its
-- reservation leaves every period it was held in, and the cost is spent
-- there, in the periods it was reserved in (a call that answers after
-- midnight was admitted before), and recorded in spend_entries. Returns what was reserved, or null when
-- the key holds nothing (settled already, or never admitted on a cap).
CREATE FUNCTION agentsaga_spend_settle(p_key text, p_usd numeric)
RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    h spend_holds%ROWTYPE;
BEGIN
    IF p_usd < 0 THEN
        RAISE EXCEPTION 'spend: settle %: % USD is negative', p_key, p_usd;
    END IF;
    DELETE FROM spend_holds s WHERE s.idempotency_key = p_key RETURNING * INTO h;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- The period rows are locked in the order reservations lock them
    -- (account, period): an UPDATE joined to the arrays would lock them
    -- in any order, and deadlock against a reservation of the same tree.
    PERFORM 1 FROM spend_periods sp
    JOIN unnest(h.accounts, h.periods, h.starts) AS x(account, period, starts)
      ON sp.account = x.account AND sp.period = x.period AND sp.starts = x.starts
    ORDER BY sp.account, sp.period, sp.starts
    FOR UPDATE OF sp;
    UPDATE spend_periods sp SET reserved = sp.reserved - h.usd, spent = sp.spent + p_usd
    FROM unnest(h.accounts, h.periods, h.starts) AS x(account, period, starts)
    WHERE sp.account = x.account AND sp.period = x.period AND sp.starts = x.starts;
    INSERT INTO spend_entries (idempotency_key, account, usd) VALUES (p_key, h.account, p_usd)
    ON CONFLICT (idempotency_key) DO UPDATE
    SET usd = spend_entries.usd + excluded.usd, settled_at = excluded.settled_at;
    RETURN h.usd;
END
$$;
-- +goose StatementEnd


-- +goose StatementBegin
-- Ends the holds whose lease has passed (their worker died, or never
-- settled): a hold whose call the ledger shows claimed may have been
-- charged by the provider, so it is spent in full (its reservation is an
-- upper bound of the cost); a hold whose call never reached the ledger is
-- released. Nothing stays held and nothing is lost. Returns how many of
-- each.
CREATE FUNCTION agentsaga_spend_expire()
RETURNS TABLE (spent_in_full integer, released integer)
LANGUAGE plpgsql AS $$
DECLARE
    h      record;
    v_full integer := 0;
    v_free integer := 0;
BEGIN
    FOR h IN
        SELECT s.idempotency_key, s.usd, EXISTS (SELECT 1 FROM actions a WHERE a.idempotency_key = s.idempotency_key) AS claimed
        FROM spend_holds s WHERE s.lease_until < clock_timestamp()
        ORDER BY s.idempotency_key
        FOR UPDATE SKIP LOCKED
    LOOP
        IF h.claimed THEN
            PERFORM agentsaga_spend_settle(h.idempotency_key, h.usd);
            v_full := v_full + 1;
        ELSE
            PERFORM agentsaga_spend_settle(h.idempotency_key, 0);
            v_free := v_free + 1;
        END IF;
    END LOOP;
    RETURN QUERY SELECT v_full, v_free;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Reserves p_usd for the call p_key against every cap of p_account and
-- its parents, or refuses it. A call that is not a finishing turn
-- (p_finishing) may use a cap only up to its room, the cap less its
-- finish_reserve; a finishing turn may use all of it. Admitted, the hold lasts until the call
-- settles or p_lease_ms passes (then the next reservation, or
-- agentsaga_spend_expire, settles or releases it). Refused, it names the first cap that binds, the outermost
-- account first: what it allows, what is spent and reserved, when it
-- resets and what the account does then. Admitted, the same columns
-- describe the cap with the least room left once the call holds its
-- part (NULL cap: the account has none), for the run's budget note. A key
-- that already holds is admitted again without holding twice (an
-- activity delivered twice). An account without caps admits everything.
CREATE FUNCTION agentsaga_spend_reserve(p_key text, p_account text, p_usd numeric, p_lease_ms bigint, p_finishing boolean)
RETURNS TABLE (admitted boolean, account text, period text, cap numeric, spent numeric, reserved numeric,
               resets timestamptz, on_exhausted text, room numeric)
LANGUAGE plpgsql AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_accounts text[] := '{}';
    v_periods  text[] := '{}';
    v_starts   timestamptz[] := '{}';
    c          record;
    p          spend_periods%ROWTYPE;
    v_tight    record; -- the cap with the least room left
    v_left     numeric;
    v_least    numeric;
BEGIN
    IF p_usd < 0 THEN
        RAISE EXCEPTION 'spend: reserve %: % USD is negative', p_key, p_usd;
    END IF;
    -- A hold whose worker died is ended first (spent in full or
    -- released), so that it never keeps a cap's room past its lease.
    PERFORM agentsaga_spend_expire();
    PERFORM pg_advisory_xact_lock(hashtextextended('spend-hold' || chr(31) || p_key, 0));
    IF EXISTS (SELECT 1 FROM spend_holds h WHERE h.idempotency_key = p_key) THEN
        RETURN QUERY SELECT true, p_account, ''::text, NULL::numeric, NULL::numeric, NULL::numeric, NULL::timestamptz, ''::text,
                            NULL::numeric;
        RETURN;
    END IF;
    FOR c IN
        SELECT s.account, s.period, s.usd, s.on_exhausted, w.starts, w.resets,
               CASE WHEN p_finishing THEN s.usd ELSE s.usd * (1 - s.finish_reserve) END AS room
        FROM spend_caps s, agentsaga_spend_period(s.period, s.time_zone, v_now) w
        WHERE s.account = ANY (agentsaga_spend_accounts(p_account))
        ORDER BY s.account, s.period
    LOOP
        INSERT INTO spend_periods AS sp (account, period, starts, resets)
        VALUES (c.account, c.period, c.starts, c.resets) ON CONFLICT DO NOTHING;
        SELECT * INTO p FROM spend_periods sp
        WHERE sp.account = c.account AND sp.period = c.period AND sp.starts = c.starts FOR UPDATE;
        IF p.spent + p.reserved + p_usd > c.room THEN
            RETURN QUERY SELECT false, c.account, c.period, c.usd, p.spent, p.reserved, c.resets, c.on_exhausted, c.room;
            RETURN; -- the transaction's locks go with it; nothing was held
        END IF;
        v_accounts := v_accounts || c.account;
        v_periods := v_periods || c.period;
        v_starts := v_starts || c.starts;
        v_left := c.room - p.spent - p.reserved - p_usd;
        IF v_least IS NULL OR v_left < v_least THEN
            v_least := v_left;
            SELECT c.account, c.period, c.usd, p.spent, p.reserved + p_usd AS reserved, c.resets, c.on_exhausted, c.room
            INTO v_tight;
        END IF;
    END LOOP;
    UPDATE spend_periods sp SET reserved = sp.reserved + p_usd
    FROM unnest(v_accounts, v_periods, v_starts) AS h(account, period, starts)
    WHERE sp.account = h.account AND sp.period = h.period AND sp.starts = h.starts;
    INSERT INTO spend_holds (idempotency_key, account, usd, accounts, periods, starts, lease_until)
    VALUES (p_key, p_account, p_usd, v_accounts, v_periods, v_starts, v_now + p_lease_ms * interval '1 millisecond');
    IF v_least IS NULL THEN
        RETURN QUERY SELECT true, p_account, ''::text, NULL::numeric, NULL::numeric, NULL::numeric, NULL::timestamptz, ''::text,
                            NULL::numeric;
    ELSE
        RETURN QUERY SELECT true, v_tight.account, v_tight.period, v_tight.usd, v_tight.spent, v_tight.reserved, v_tight.resets,
                            v_tight.on_exhausted, v_tight.room;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_spend_expire();
DROP FUNCTION agentsaga_spend_settle(text, numeric);
DROP FUNCTION agentsaga_spend_reserve(text, text, numeric, bigint, boolean);
DROP FUNCTION agentsaga_spend_set_cap(text, text, text, numeric, text, numeric, text);
DROP FUNCTION agentsaga_spend_accounts(text);
DROP FUNCTION agentsaga_spend_period(text, text, timestamptz);
DROP TABLE spend_entries;
DROP TABLE spend_holds;
DROP TABLE spend_periods;
DROP TABLE spend_cap_changes;
DROP TABLE spend_caps;
