-- +goose Up

-- Rolling spend caps (issue 31): a cap on what an account spends in any
-- window of a stated length ("rolling 24h"), beside the calendar-aligned
-- ones. A rolling cap's spend is kept in buckets of a sixtieth of its
-- window (at least a second), each a spend_periods row whose resets is
-- when the last of its spend leaves the window. A call's cost is settled
-- into the bucket it was reserved in, and that bucket's resets moves to
-- a window past the settle: a dollar spent counts for a whole window
-- after it was spent, and a bucket counts whole while any of it is in
-- the window, so the sum errs high (the cap binds up to a sixtieth
-- early) and never low.
ALTER TABLE spend_caps DROP CONSTRAINT spend_caps_period_check,
    ADD CONSTRAINT spend_caps_period_check
    CHECK (period IN ('minute', 'hour', 'day', 'month') OR period ~ '^rolling [1-9][0-9]*[hms]$');

-- How many calls each cap refused, since it was first set: the
-- operators' metric agentsaga_spend_refusals_total. A refusal writes
-- nothing in the statement that refuses (the claim is undone whole), so
-- it is counted by a statement of its own, off the path of calls that fit.
CREATE TABLE spend_refusals (
    account  text NOT NULL,
    period   text NOT NULL,
    refusals bigint NOT NULL DEFAULT 0,
    last_at  timestamptz NOT NULL,
    PRIMARY KEY (account, period)
);

-- +goose StatementBegin
-- The window of a rolling period ('rolling 24h'), or null for a calendar
-- one.
CREATE FUNCTION agentsaga_spend_window(p_period text)
RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_period LIKE 'rolling %' THEN substr(p_period, 9)::interval END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The period row of a cap that holds p_at: a calendar period, its start
-- and the next one's, in the cap's time zone (a local day is 23 or 25
-- hours across a DST change); or a rolling cap's bucket, its start and
-- when it leaves the window.
CREATE OR REPLACE FUNCTION agentsaga_spend_period(p_period text, p_time_zone text, p_at timestamptz)
RETURNS TABLE (starts timestamptz, resets timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN w.win IS NULL
                THEN date_trunc(p_period, p_at AT TIME ZONE p_time_zone) AT TIME ZONE p_time_zone
                ELSE to_timestamp(floor(extract(epoch FROM p_at) / w.bucket) * w.bucket) END,
           CASE WHEN w.win IS NULL
                THEN (date_trunc(p_period, p_at AT TIME ZONE p_time_zone) + ('1 ' || p_period)::interval) AT TIME ZONE p_time_zone
                ELSE to_timestamp(floor(extract(epoch FROM p_at) / w.bucket) * w.bucket + w.bucket) + w.win END
    FROM (SELECT agentsaga_spend_window(p_period) AS win,
                 greatest(floor(extract(epoch FROM agentsaga_spend_window(p_period)) / 60), 1) AS bucket) w
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- What a cap holds at p_at: spent in its current period (a rolling cap:
-- in every bucket still in its window), reserved by calls in flight
-- (wherever they were reserved), and when room next frees (a calendar
-- cap: its reset; a rolling cap: when its oldest spend leaves the
-- window, or its current bucket's end when nothing is spent).
CREATE FUNCTION agentsaga_spend_held(p_account text, p_period text, p_time_zone text, p_at timestamptz)
RETURNS TABLE (spent numeric, reserved numeric, frees timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(sp.spent) FILTER (WHERE sp.resets > p_at), 0),
           coalesce(sum(sp.reserved), 0),
           coalesce(min(sp.resets) FILTER (WHERE sp.resets > p_at AND sp.spent > 0),
                    (SELECT w.resets FROM agentsaga_spend_period(p_period, p_time_zone, p_at) w))
    FROM spend_periods sp
    WHERE sp.account = p_account AND sp.period = p_period AND (sp.resets > p_at OR sp.reserved <> 0)
      -- A row older than its period (or window) and two days (a lease
      -- far longer than any call's) holds nothing: the bound keeps the
      -- scan to the newest rows of the cap's primary key.
      AND sp.starts > p_at - coalesce(agentsaga_spend_window(p_period), ('1 ' || p_period)::interval) - interval '2 days'
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Settles as 00021's agentsaga_spend_settle does; a rolling cap's bucket
-- then keeps what was spent in its window for a whole window from now.
CREATE OR REPLACE FUNCTION agentsaga_spend_settle(p_key text, p_usd numeric)
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
    UPDATE spend_periods sp SET reserved = sp.reserved - h.usd, spent = sp.spent + p_usd,
        resets = CASE WHEN agentsaga_spend_window(sp.period) IS NULL OR p_usd = 0 THEN sp.resets
                      ELSE greatest(sp.resets, clock_timestamp() + agentsaga_spend_window(sp.period)) END
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
-- Reserves as 00021's agentsaga_spend_reserve does, over what each cap
-- holds (agentsaga_spend_held) rather than its current row alone. A
-- rolling cap's reservations take a lock of the cap, in the same
-- (account, period) order as the rows': two calls in different buckets
-- of one window must not both see the room that only one of them fits.
CREATE OR REPLACE FUNCTION agentsaga_spend_reserve(p_key text, p_account text, p_usd numeric, p_lease_ms bigint, p_finishing boolean)
RETURNS TABLE (admitted boolean, account text, period text, cap numeric, spent numeric, reserved numeric,
               resets timestamptz, on_exhausted text, room numeric)
LANGUAGE plpgsql AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_accounts text[] := '{}';
    v_periods  text[] := '{}';
    v_starts   timestamptz[] := '{}';
    c          record;
    held       record;
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
        SELECT s.account, s.period, s.time_zone, s.usd, s.on_exhausted, w.starts, w.resets,
               CASE WHEN p_finishing THEN s.usd ELSE s.usd * (1 - s.finish_reserve) END AS room
        FROM spend_caps s, agentsaga_spend_period(s.period, s.time_zone, v_now) w
        WHERE s.account = ANY (agentsaga_spend_accounts(p_account))
        ORDER BY s.account, s.period
    LOOP
        IF agentsaga_spend_window(c.period) IS NOT NULL THEN
            PERFORM pg_advisory_xact_lock(hashtextextended('spend-cap' || chr(31) || c.account || chr(31) || c.period, 0));
        END IF;
        INSERT INTO spend_periods AS sp (account, period, starts, resets)
        VALUES (c.account, c.period, c.starts, c.resets) ON CONFLICT DO NOTHING;
        PERFORM 1 FROM spend_periods sp
        WHERE sp.account = c.account AND sp.period = c.period AND sp.starts = c.starts FOR UPDATE;
        SELECT * INTO held FROM agentsaga_spend_held(c.account, c.period, c.time_zone, v_now);
        IF held.spent + held.reserved + p_usd > c.room THEN
            RETURN QUERY SELECT false, c.account, c.period, c.usd, held.spent, held.reserved, held.frees, c.on_exhausted, c.room;
            RETURN; -- the transaction's locks go with it; nothing was held
        END IF;
        v_accounts := v_accounts || c.account;
        v_periods := v_periods || c.period;
        v_starts := v_starts || c.starts;
        v_left := c.room - held.spent - held.reserved - p_usd;
        IF v_least IS NULL OR v_left < v_least THEN
            v_least := v_left;
            SELECT c.account, c.period, c.usd, held.spent, held.reserved + p_usd AS reserved, held.frees AS resets,
                   c.on_exhausted, c.room
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
DELETE FROM spend_caps WHERE period LIKE 'rolling %';
ALTER TABLE spend_caps DROP CONSTRAINT spend_caps_period_check,
    ADD CONSTRAINT spend_caps_period_check CHECK (period IN ('minute', 'hour', 'day', 'month'));

-- +goose StatementBegin
-- 00021's, as it was.
CREATE OR REPLACE FUNCTION agentsaga_spend_period(p_period text, p_time_zone text, p_at timestamptz)
RETURNS TABLE (starts timestamptz, resets timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT date_trunc(p_period, p_at AT TIME ZONE p_time_zone) AT TIME ZONE p_time_zone,
           (date_trunc(p_period, p_at AT TIME ZONE p_time_zone) + ('1 ' || p_period)::interval) AT TIME ZONE p_time_zone
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- 00021's, as it was.
CREATE OR REPLACE FUNCTION agentsaga_spend_settle(p_key text, p_usd numeric)
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
-- 00021's, as it was.
CREATE OR REPLACE FUNCTION agentsaga_spend_reserve(p_key text, p_account text, p_usd numeric, p_lease_ms bigint, p_finishing boolean)
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

DROP FUNCTION agentsaga_spend_held(text, text, text, timestamptz);
DROP FUNCTION agentsaga_spend_window(text);
DROP TABLE spend_refusals;

-- 00029's Down keeps run_admissions and agentsaga_key_runs, which the spend
-- bodies it leaves read. From here down nothing reads them (the bodies
-- above are 00022's), so they go with the rest of the spend caps' schema
-- and a database migrated down can be migrated up again.
DROP FUNCTION IF EXISTS agentsaga_key_runs(text);
DROP TABLE IF EXISTS run_admissions;
