-- +goose Up

-- Admission by run (issue 43). Under an account's spend cap, a concurrency
-- limit or a model's max_concurrent_runs, a run is admitted whole before
-- its first turn, or waits in a durable queue with status 'queued': the
-- engine starts the runs it can pay for and finishes them, instead of
-- sharing the cap out a turn at a time until every run is cut short.
--
-- An admitted run holds a run reservation (held) on its account's caps:
-- its estimate, taken out of the caps' room as one hold. Its turns draw on
-- it first (agentsaga_spend_reserve), so another run's turns never stop
-- it; a turn that outgrows what is left draws on the caps as before. The
-- reservation is given back when the run ends (a trigger on runs), or
-- when its lease (the run's deadline) passes.
--
-- The queue of a root account ("acme" for acme/support) is served by one
-- pass at a time (an advisory lock): the best priority first (1 before
-- 5), then the account least served for its weight (weighted round robin
-- by virtual time: each admission adds 1/weight to its account), then
-- FIFO. A run that does not fit blocks its own account for the pass, not
-- the others. Every change that can free room notifies the channel
-- agentsaga_admission with the root, and the workers' admission loops run
-- a pass and signal the runs it admitted.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'partial', 'escalated', 'compensated', 'needs-attention', 'failed',
                      'terminated'));

-- 'run' (the default): runs under the cap are admitted whole; 'turn': the
-- cap is shared out turn by turn, as before the queue existed.
ALTER TABLE spend_caps ADD COLUMN admit text NOT NULL DEFAULT 'run' CHECK (admit IN ('run', 'turn'));

-- An account's share of the fleet: how many of its runs (and its
-- children's) may be admitted at once (null: no limit), its weight in the
-- round robin, and the virtual time the round robin serves it by.
CREATE TABLE admission_accounts (
    account             text PRIMARY KEY CHECK (account <> ''),
    max_concurrent_runs integer CHECK (max_concurrent_runs > 0),
    weight              integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    served              numeric NOT NULL DEFAULT 0,
    updated_by          text NOT NULL DEFAULT '',
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE run_admissions (
    run_id      text PRIMARY KEY,
    account     text NOT NULL,
    root        text NOT NULL,
    -- The spec without its goal, hashed: runs of one spec learn one
    -- estimate.
    spec_key    text NOT NULL,
    -- provider:model of the run's model, and its max_concurrent_runs.
    quota_key   text NOT NULL DEFAULT '',
    quota_max   integer,
    priority    smallint NOT NULL DEFAULT 3 CHECK (priority BETWEEN 1 AND 5),
    seq         bigserial,
    status      text NOT NULL CHECK (status IN ('queued', 'admitted', 'ended', 'cancelled')),
    -- Why a queued run waits, as the last pass found it.
    reason      text NOT NULL DEFAULT '',
    estimate    numeric NOT NULL DEFAULT 0,
    -- The run reservation left, and the period rows it is held in.
    held        numeric NOT NULL DEFAULT 0,
    accounts    text[] NOT NULL DEFAULT '{}',
    periods     text[] NOT NULL DEFAULT '{}',
    starts      timestamptz[] NOT NULL DEFAULT '{}',
    -- How long an admitted run's reservation lives (its wall clock and a
    -- margin; 0: until the run ends), and until when it does.
    lease_ms    bigint NOT NULL DEFAULT 0,
    lease_until timestamptz,
    -- Whether the run was told it is admitted (the loops signal those that
    -- were not).
    signalled   boolean NOT NULL DEFAULT false,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    admitted_at timestamptz,
    ended_at    timestamptz,
    outcome     text NOT NULL DEFAULT '',
    -- What the run's calls cost, as their settles recorded it.
    spent       numeric NOT NULL DEFAULT 0
);
CREATE INDEX run_admissions_queue ON run_admissions (root, priority, seq) WHERE status = 'queued';
CREATE INDEX run_admissions_running ON run_admissions (account) WHERE status = 'admitted';
CREATE INDEX run_admissions_unsignalled ON run_admissions (run_id) WHERE status = 'admitted' AND NOT signalled;
CREATE INDEX run_admissions_learned ON run_admissions (account, spec_key, ended_at DESC) WHERE outcome = 'completed';

-- A call's hold names the run whose reservation it drew on, and how much.
ALTER TABLE spend_holds ADD COLUMN run_id text, ADD COLUMN from_run numeric NOT NULL DEFAULT 0;

-- +goose StatementBegin
-- The runs an idempotency key may belong to: each prefix of it before a
-- '/', the longest first (a sub-agent's workflow ID extends its parent's).
CREATE FUNCTION agentsaga_key_runs(p_key text)
RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(array_to_string(parts[1:n], '/') ORDER BY n DESC), '{}')
    FROM (SELECT string_to_array(p_key, '/') AS parts) p, generate_series(1, cardinality(p.parts) - 1) AS n
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Ends a run's admission: its reservation leaves the periods it was held
-- in, and a queued run is cancelled. Idempotent.
CREATE FUNCTION agentsaga_admission_end(p_run_id text, p_outcome text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    a run_admissions%ROWTYPE;
BEGIN
    SELECT * INTO a FROM run_admissions r WHERE r.run_id = p_run_id FOR UPDATE;
    IF NOT FOUND OR a.status IN ('ended', 'cancelled') THEN
        RETURN;
    END IF;
    IF a.held <> 0 THEN
        PERFORM 1 FROM spend_periods sp
        JOIN unnest(a.accounts, a.periods, a.starts) AS x(account, period, starts)
          ON sp.account = x.account AND sp.period = x.period AND sp.starts = x.starts
        ORDER BY sp.account, sp.period, sp.starts
        FOR UPDATE OF sp;
        UPDATE spend_periods sp SET reserved = sp.reserved - a.held
        FROM unnest(a.accounts, a.periods, a.starts) AS x(account, period, starts)
        WHERE sp.account = x.account AND sp.period = x.period AND sp.starts = x.starts;
    END IF;
    UPDATE run_admissions r
    SET status = CASE WHEN a.status = 'queued' THEN 'cancelled' ELSE 'ended' END,
        held = 0, ended_at = clock_timestamp(), outcome = p_outcome
    WHERE r.run_id = p_run_id;
    -- Room or a place may have freed: the loops run a pass, if anything
    -- waits (most runs end under no queue at all).
    IF EXISTS (SELECT 1 FROM run_admissions r WHERE r.root = a.root AND r.status = 'queued') THEN
        PERFORM pg_notify('agentsaga_admission', a.root);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Admits the queued runs of a root account that fit, in order, and
-- returns how many it admitted. Each admitted run reserves its estimate
-- (at most what a cap's room can ever hold) on every 'run' cap of its
-- account tree. A run that does not fit records why, and blocks what it
-- waits for, for the rest of the pass: the account a cap or a
-- max_concurrent_runs binds on, with its sub-accounts (a later, smaller
-- run must not take the room the first in line waits for), or its model.
-- The runs behind it record that they wait behind it.
--
-- Locks, in the order every other writer takes them: the root's queue
-- (an advisory lock: one pass at a time, and the enqueues), then for a
-- run the runs row (FinishRun's trigger holds it while it ends the
-- run's admission), its run_admissions row, then the caps' period rows
-- (as agentsaga_spend_reserve and agentsaga_spend_settle do). The
-- models' concurrency is counted across roots, under one lock of its
-- own.
CREATE FUNCTION agentsaga_admission_pass(p_root text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_now       timestamptz := clock_timestamp();
    q           run_admissions%ROWTYPE;
    v_id        text;
    c           record;
    held        record;
    lim         record;
    -- What waits, and why: account subtrees and models, each with the
    -- first run in line that waits for it.
    v_blocked   text[] := '{}';
    v_b_runs    text[] := '{}';
    v_b_reasons text[] := '{}';
    v_models    text[] := '{}';
    v_m_runs    text[] := '{}';
    v_m_reasons text[] := '{}';
    v_reason    text;
    v_est       numeric;
    v_accts     text[];
    v_pers      text[];
    v_starts    timestamptz[];
    v_ids       text[];
    v_reasons   text[];
    v_n         integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('admission' || chr(31) || p_root, 0));
    -- A run whose lease passed (its worker and its deadline are gone)
    -- holds nothing any more. Every row is locked before any period is.
    SELECT coalesce(array_agg(r.run_id ORDER BY r.run_id), '{}') INTO v_ids FROM run_admissions r
    WHERE r.status = 'admitted' AND r.root = p_root AND r.lease_until < v_now;
    IF cardinality(v_ids) > 0 THEN
        PERFORM 1 FROM runs u WHERE u.workflow_id = ANY (v_ids) ORDER BY u.workflow_id FOR UPDATE;
        PERFORM 1 FROM run_admissions r WHERE r.run_id = ANY (v_ids) ORDER BY r.run_id FOR UPDATE;
        FOREACH v_id IN ARRAY v_ids LOOP
            PERFORM agentsaga_admission_end(v_id, 'lease passed');
        END LOOP;
    END IF;
    LOOP
        SELECT a.run_id INTO v_id
        FROM run_admissions a LEFT JOIN admission_accounts w ON w.account = a.account
        WHERE a.root = p_root AND a.status = 'queued'
          AND NOT (agentsaga_spend_accounts(a.account) && v_blocked)
          AND NOT (a.quota_max IS NOT NULL AND a.quota_key = ANY (v_models))
        ORDER BY a.priority, coalesce(w.served, 0), a.seq
        LIMIT 1;
        EXIT WHEN NOT FOUND;
        PERFORM 1 FROM runs u WHERE u.workflow_id = v_id FOR UPDATE;
        SELECT * INTO q FROM run_admissions a WHERE a.run_id = v_id FOR UPDATE;
        IF q.status <> 'queued' THEN
            CONTINUE; -- ended (cancelled) since: the next statement does not see it queued
        END IF;
        v_reason := NULL;
        -- Concurrency: the account and each parent with a limit.
        SELECT w.account, w.max_concurrent_runs, n.running
        INTO lim
        FROM admission_accounts w,
             LATERAL (SELECT count(*) AS running FROM run_admissions r
                      WHERE r.status = 'admitted' AND (r.account = w.account OR starts_with(r.account, w.account || '/'))) n
        WHERE w.account = ANY (agentsaga_spend_accounts(q.account)) AND w.max_concurrent_runs IS NOT NULL
          AND n.running >= w.max_concurrent_runs
        ORDER BY w.account
        LIMIT 1;
        IF FOUND THEN
            v_reason := 'account ' || lim.account || ' runs ' || lim.running || ' of its ' || lim.max_concurrent_runs
                        || ' concurrent runs (max_concurrent_runs); the next to end frees a place';
            v_blocked := v_blocked || lim.account;
            v_b_runs := v_b_runs || q.run_id;
            v_b_reasons := v_b_reasons || v_reason;
        END IF;
        IF v_reason IS NULL AND q.quota_max IS NOT NULL THEN
            -- A model's runs are counted across root accounts: their passes
            -- take turns here.
            PERFORM pg_advisory_xact_lock(hashtextextended('admission-models', 0));
            IF (SELECT count(*) FROM run_admissions r WHERE r.status = 'admitted' AND r.quota_key = q.quota_key) >= q.quota_max THEN
                v_reason := 'model ' || q.quota_key || ' runs ' || q.quota_max
                            || ' concurrent runs (its max_concurrent_runs); the next to end frees a place';
                v_models := v_models || q.quota_key;
                v_m_runs := v_m_runs || q.run_id;
                v_m_reasons := v_m_reasons || v_reason;
            END IF;
        END IF;
        v_accts := '{}';
        v_pers := '{}';
        v_starts := '{}';
        IF v_reason IS NULL THEN
            SELECT least(q.estimate, min(s.usd * (1 - s.finish_reserve))) INTO v_est
            FROM spend_caps s WHERE s.account = ANY (agentsaga_spend_accounts(q.account)) AND s.admit = 'run';
            v_est := coalesce(v_est, q.estimate);
            FOR c IN
                SELECT s.account, s.period, s.time_zone, s.usd, w.starts, w.resets, s.usd * (1 - s.finish_reserve) AS room
                FROM spend_caps s, agentsaga_spend_period(s.period, s.time_zone, v_now) w
                WHERE s.account = ANY (agentsaga_spend_accounts(q.account)) AND s.admit = 'run'
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
                IF held.spent + held.reserved >= c.room OR held.spent + held.reserved + v_est > c.room THEN
                    -- Concatenated (the guard of migrations forbids building SQL at run
                    -- time in a migration): every part is coalesced, as
                    -- a null would make the whole reason null and the
                    -- run admitted.
                    v_reason := 'account ' || c.account || ' has $' || round(greatest(c.room - held.spent - held.reserved, 0), 4)
                        || ' of its $' || round(c.usd, 4) || ' per ' || c.period || ' spend cap for runs ($'
                        || round(held.spent, 4) || ' spent, $' || round(held.reserved, 4) || ' held), and the run is estimated at $'
                        || round(v_est, 4) || '; room frees as runs end below their estimates, when the cap is raised, or at '
                        || coalesce(to_char(held.frees AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'), 'the period''s reset');
                    v_blocked := v_blocked || c.account;
                    v_b_runs := v_b_runs || q.run_id;
                    v_b_reasons := v_b_reasons || v_reason;
                    EXIT;
                END IF;
                v_accts := v_accts || c.account;
                v_pers := v_pers || c.period;
                v_starts := v_starts || c.starts;
            END LOOP;
        END IF;
        IF v_reason IS NOT NULL THEN
            UPDATE runs SET status_detail = v_reason WHERE workflow_id = q.run_id AND status = 'queued' AND status_detail <> v_reason;
            UPDATE run_admissions r SET reason = v_reason WHERE r.run_id = q.run_id AND r.reason IS DISTINCT FROM v_reason;
            CONTINUE;
        END IF;
        IF cardinality(v_accts) = 0 THEN
            v_est := 0;
        END IF;
        UPDATE spend_periods sp SET reserved = sp.reserved + v_est
        FROM unnest(v_accts, v_pers, v_starts) AS x(account, period, starts)
        WHERE sp.account = x.account AND sp.period = x.period AND sp.starts = x.starts;
        UPDATE run_admissions r
        SET status = 'admitted', held = v_est, accounts = v_accts, periods = v_pers, starts = v_starts,
            admitted_at = v_now, reason = '', signalled = false,
            lease_until = CASE WHEN r.lease_ms > 0 THEN v_now + r.lease_ms * interval '1 millisecond' END
        WHERE r.run_id = q.run_id;
        UPDATE runs SET status = 'running', status_detail = '' WHERE workflow_id = q.run_id AND status = 'queued';
        INSERT INTO admission_accounts AS w (account, served) VALUES (q.account, 1)
        ON CONFLICT (account) DO UPDATE SET served = w.served + 1.0 / w.weight;
        v_n := v_n + 1;
    END LOOP;
    -- The runs behind one that waits wait for the same: each says so
    -- (runs rows first, as everywhere).
    SELECT coalesce(array_agg(x.run_id), '{}'), coalesce(array_agg(x.reason), '{}') INTO v_ids, v_reasons
    FROM (SELECT DISTINCT ON (r.run_id) r.run_id, 'behind run ' || b.run_id || ', which waits: ' || b.reason AS reason
          FROM run_admissions r
          JOIN (SELECT * FROM unnest(v_blocked, v_b_runs, v_b_reasons)) AS b(account, run_id, reason)
            ON r.account = b.account OR starts_with(r.account, b.account || '/')
          WHERE r.root = p_root AND r.status = 'queued' AND r.run_id <> b.run_id
          ORDER BY r.run_id, length(b.account)
         ) x;
    IF cardinality(v_models) > 0 THEN
        SELECT v_ids || coalesce(array_agg(x.run_id), '{}'), v_reasons || coalesce(array_agg(x.reason), '{}') INTO v_ids, v_reasons
        FROM (SELECT DISTINCT ON (r.run_id) r.run_id, 'behind run ' || b.run_id || ', which waits: ' || b.reason AS reason
              FROM run_admissions r
              JOIN (SELECT * FROM unnest(v_models, v_m_runs, v_m_reasons)) AS b(model, run_id, reason) ON r.quota_key = b.model
              WHERE r.root = p_root AND r.status = 'queued' AND r.quota_max IS NOT NULL AND r.run_id <> b.run_id
                AND NOT (r.run_id = ANY (v_ids))
              ORDER BY r.run_id
             ) x;
    END IF;
    IF cardinality(v_ids) > 0 THEN
        UPDATE runs u SET status_detail = x.reason FROM unnest(v_ids, v_reasons) AS x(run_id, reason)
        WHERE u.workflow_id = x.run_id AND u.status = 'queued' AND u.status_detail <> x.reason;
        UPDATE run_admissions r SET reason = x.reason FROM unnest(v_ids, v_reasons) AS x(run_id, reason)
        WHERE r.run_id = x.run_id AND r.status = 'queued' AND r.reason <> x.reason;
    END IF;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Puts a run in its root account's queue (once: a run asking again reads
-- where it stands, and runs a pass), and admits what fits. A run under no
-- 'run' cap, no concurrency limit and no model limit is admitted at once.
-- The estimate is the run's budget.usd, or, when tighter, the 95th
-- percentile of what the account's last 20 completed runs of the same
-- spec cost (once there are 5).
CREATE FUNCTION agentsaga_admission_enqueue(p_run_id text, p_account text, p_spec_key text, p_quota_key text,
                                            p_quota_max integer, p_priority integer, p_budget_usd numeric, p_lease_ms bigint)
RETURNS TABLE (status text, place bigint, reason text, estimate numeric)
LANGUAGE plpgsql AS $$
DECLARE
    v_root    text := split_part(p_account, '/', 1);
    v_needed  boolean;
    v_learned numeric;
    v_samples bigint;
    v_est     numeric;
BEGIN
    -- The root's queue is locked for the whole statement, as its passes
    -- lock it: an enqueue and a pass never interleave (the served of an
    -- account, its first run, the pass's own lock, in any order).
    PERFORM pg_advisory_xact_lock(hashtextextended('admission' || chr(31) || v_root, 0));
    IF NOT EXISTS (SELECT 1 FROM run_admissions r WHERE r.run_id = p_run_id) THEN
        v_needed := p_quota_max IS NOT NULL
            OR EXISTS (SELECT 1 FROM spend_caps s WHERE s.account = ANY (agentsaga_spend_accounts(p_account)) AND s.admit = 'run')
            OR EXISTS (SELECT 1 FROM admission_accounts w
                       WHERE w.account = ANY (agentsaga_spend_accounts(p_account)) AND w.max_concurrent_runs IS NOT NULL);
        SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY l.spent), count(*) INTO v_learned, v_samples
        FROM (SELECT r.spent FROM run_admissions r
              WHERE r.account = p_account AND r.spec_key = p_spec_key AND r.outcome = 'completed'
              ORDER BY r.ended_at DESC LIMIT 20) l;
        IF v_samples < 5 THEN
            v_learned := NULL;
        END IF;
        v_est := CASE WHEN p_budget_usd > 0 THEN least(p_budget_usd, coalesce(v_learned, p_budget_usd))
                      ELSE coalesce(v_learned, 0) END;
        IF v_needed AND NOT EXISTS (SELECT 1 FROM run_admissions r
                                    WHERE r.account = p_account AND r.status IN ('queued', 'admitted')) THEN
            -- An account coming back to the queue, or new to it, starts
            -- level with the least served account of the root that runs
            -- or waits, not with what it is owed from its idle time (a
            -- newcomer at 0 would take every place until it caught up).
            INSERT INTO admission_accounts AS w (account, served)
            VALUES (p_account, coalesce((SELECT min(x.served) FROM admission_accounts x
                                         WHERE x.account <> p_account
                                           AND x.account IN (SELECT r.account FROM run_admissions r
                                                             WHERE r.root = v_root AND r.status IN ('queued', 'admitted'))), 0))
            ON CONFLICT (account) DO UPDATE SET served = greatest(w.served, excluded.served);
        END IF;
        INSERT INTO run_admissions (run_id, account, root, spec_key, quota_key, quota_max, priority, status, estimate,
                                    lease_ms, lease_until, admitted_at, signalled)
        VALUES (p_run_id, p_account, v_root, p_spec_key, p_quota_key, p_quota_max, p_priority,
                CASE WHEN v_needed THEN 'queued' ELSE 'admitted' END, v_est, greatest(p_lease_ms, 0),
                CASE WHEN p_lease_ms > 0 AND NOT v_needed THEN clock_timestamp() + p_lease_ms * interval '1 millisecond' END,
                CASE WHEN v_needed THEN NULL ELSE clock_timestamp() END, NOT v_needed)
        ON CONFLICT (run_id) DO NOTHING;
        IF v_needed THEN
            UPDATE runs u SET status = 'queued' WHERE u.workflow_id = p_run_id AND u.status = 'running';
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM run_admissions r WHERE r.run_id = p_run_id AND r.status = 'queued') THEN
        IF agentsaga_admission_pass(v_root) > 0 THEN
            PERFORM pg_notify('agentsaga_admission', v_root);
        END IF;
    END IF;
    UPDATE run_admissions r SET signalled = true WHERE r.run_id = p_run_id AND r.status = 'admitted' AND NOT r.signalled;
    RETURN QUERY
    SELECT a.status,
           CASE WHEN a.status = 'queued'
                THEN (SELECT count(*) FROM run_admissions b
                      WHERE b.root = a.root AND b.status = 'queued' AND (b.priority, b.seq) <= (a.priority, a.seq)) END,
           a.reason, a.estimate
    FROM run_admissions a WHERE a.run_id = p_run_id;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A run's admission ends with the run: a trigger, so that every way a run
-- ends (its own finish, the reconciler's 'terminated', an abort) gives
-- its reservation back. An escalated run keeps it: a human may resume it.
CREATE FUNCTION agentsaga_admission_run_ended()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM agentsaga_admission_end(NEW.workflow_id, NEW.status);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER runs_admission_end AFTER UPDATE OF status ON runs
FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status
                   AND NEW.status NOT IN ('queued', 'running', 'escalated'))
EXECUTE FUNCTION agentsaga_admission_run_ended();

-- +goose StatementBegin
-- A cap or an account's limits changed: the queue may move (a raised cap
-- starts waiting runs at once).
CREATE FUNCTION agentsaga_admission_limits_changed()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('agentsaga_admission', split_part(coalesce(NEW.account, OLD.account), '/', 1));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER spend_caps_admission AFTER INSERT OR UPDATE OR DELETE ON spend_caps
FOR EACH ROW EXECUTE FUNCTION agentsaga_admission_limits_changed();
CREATE TRIGGER admission_accounts_changed AFTER INSERT OR UPDATE OF max_concurrent_runs, weight OR DELETE ON admission_accounts
FOR EACH ROW EXECUTE FUNCTION agentsaga_admission_limits_changed();

-- +goose StatementBegin
-- Reserves as 00023's agentsaga_spend_reserve does, but a call of an
-- admitted run draws first on its run's reservation (the longest run ID
-- its key extends, so a sub-agent draws on its parent's), and only what
-- that cannot cover on the caps its reservation is held in. A cap it is
-- not held in (one whose admit is 'turn', or one set since the run was
-- admitted) reserves the whole call, as before: turns are shared out
-- there, and the run's own reservation must not stop its turns on the
-- caps it is held in.
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
    v_run      run_admissions%ROWTYPE;
    v_from     numeric := 0;
    v_own      numeric;
    v_need     numeric;
    v_needs    numeric[] := '{}';
BEGIN
    IF p_usd < 0 THEN
        RAISE EXCEPTION 'spend: reserve %: % USD is negative', p_key, p_usd;
    END IF;
    PERFORM agentsaga_spend_expire();
    PERFORM pg_advisory_xact_lock(hashtextextended('spend-hold' || chr(31) || p_key, 0));
    IF EXISTS (SELECT 1 FROM spend_holds h WHERE h.idempotency_key = p_key) THEN
        RETURN QUERY SELECT true, p_account, ''::text, NULL::numeric, NULL::numeric, NULL::numeric, NULL::timestamptz, ''::text,
                            NULL::numeric;
        RETURN;
    END IF;
    SELECT * INTO v_run FROM run_admissions a
    WHERE a.run_id = ANY (agentsaga_key_runs(p_key))
    ORDER BY length(a.run_id) DESC LIMIT 1
    FOR UPDATE;
    IF FOUND AND v_run.status = 'admitted' AND v_run.held > 0
       AND EXISTS (SELECT 1 FROM spend_caps s, unnest(v_run.accounts, v_run.periods) AS x(account, period)
                   WHERE s.account = ANY (agentsaga_spend_accounts(p_account)) AND x.account = s.account AND x.period = s.period) THEN
        v_from := least(p_usd, v_run.held);
    END IF;
    v_own := p_usd - v_from;
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
        -- A cap the run's reservation is held in takes what it cannot
        -- cover; another (a cap that shares out turns, admit 'turn', or
        -- one set since the run was admitted) the whole call.
        v_need := CASE WHEN v_from > 0 AND EXISTS (SELECT 1 FROM unnest(v_run.accounts, v_run.periods) AS x(account, period)
                                                   WHERE x.account = c.account AND x.period = c.period)
                       THEN v_own ELSE p_usd END;
        -- A call its run's reservation covers whole takes nothing more
        -- from the cap: however full other runs' turns (a finishing
        -- turn, in the finishing reserve) or a lowered cap left it, it
        -- goes.
        IF (v_need > 0 OR v_from = 0) AND held.spent + held.reserved + v_need > c.room THEN
            RETURN QUERY SELECT false, c.account, c.period, c.usd, held.spent, held.reserved, held.frees, c.on_exhausted, c.room;
            RETURN; -- the transaction's locks go with it; nothing was held
        END IF;
        v_accounts := v_accounts || c.account;
        v_periods := v_periods || c.period;
        v_starts := v_starts || c.starts;
        v_needs := v_needs || v_need;
        v_left := c.room - held.spent - held.reserved - v_need;
        IF v_least IS NULL OR v_left < v_least THEN
            v_least := v_left;
            SELECT c.account, c.period, c.usd, held.spent, held.reserved + v_need AS reserved, held.frees AS resets,
                   c.on_exhausted, c.room
            INTO v_tight;
        END IF;
    END LOOP;
    UPDATE spend_periods sp SET reserved = sp.reserved + h.need
    FROM unnest(v_accounts, v_periods, v_starts, v_needs) AS h(account, period, starts, need)
    WHERE sp.account = h.account AND sp.period = h.period AND sp.starts = h.starts;
    IF v_from > 0 THEN
        UPDATE run_admissions a SET held = a.held - v_from WHERE a.run_id = v_run.run_id;
    END IF;
    INSERT INTO spend_holds (idempotency_key, account, usd, accounts, periods, starts, lease_until, run_id, from_run)
    VALUES (p_key, p_account, v_own, v_accounts, v_periods, v_starts, v_now + p_lease_ms * interval '1 millisecond',
            v_run.run_id, v_from);
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

-- +goose StatementBegin
-- Settles as 00023's agentsaga_spend_settle does. A call that drew on its
-- run's reservation spends from it first: what it did not spend goes back
-- to the run while the run is admitted, and out of the caps once it has
-- ended. What the call cost is added to its run's spent, which teaches
-- the next runs of its spec their estimate. Settling room back to a cap
-- with runs queued under it wakes the admission loops.
CREATE OR REPLACE FUNCTION agentsaga_spend_settle(p_key text, p_usd numeric)
RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    h         spend_holds%ROWTYPE;
    v_run     run_admissions%ROWTYPE;
    v_drawn   numeric := 0; -- the part of the cost paid from the run's reservation
    v_release numeric := 0; -- the run's reservation that leaves the caps
BEGIN
    IF p_usd < 0 THEN
        RAISE EXCEPTION 'spend: settle %: % USD is negative', p_key, p_usd;
    END IF;
    DELETE FROM spend_holds s WHERE s.idempotency_key = p_key RETURNING * INTO h;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF h.run_id IS NOT NULL THEN
        SELECT * INTO v_run FROM run_admissions a WHERE a.run_id = h.run_id FOR UPDATE;
        IF FOUND THEN
            v_drawn := least(p_usd, h.from_run);
            v_release := v_drawn;
            IF v_run.status = 'admitted' THEN
                UPDATE run_admissions a SET held = a.held + (h.from_run - v_drawn), spent = a.spent + p_usd
                WHERE a.run_id = h.run_id;
            ELSE
                v_release := h.from_run;
                UPDATE run_admissions a SET spent = a.spent + p_usd WHERE a.run_id = h.run_id;
            END IF;
        END IF;
    END IF;
    -- The period rows are locked in the order reservations lock them.
    PERFORM 1 FROM spend_periods sp
    JOIN (SELECT * FROM unnest(h.accounts, h.periods, h.starts)
          UNION SELECT * FROM unnest(v_run.accounts, v_run.periods, v_run.starts) WHERE v_release <> 0)
         AS x(account, period, starts)
      ON sp.account = x.account AND sp.period = x.period AND sp.starts = x.starts
    ORDER BY sp.account, sp.period, sp.starts
    FOR UPDATE OF sp;
    -- A cap the run's reservation is not held in reserved the whole call
    -- (agentsaga_spend_reserve): what it drew from the run too.
    UPDATE spend_periods sp SET reserved = sp.reserved - h.usd
            - CASE WHEN h.from_run <> 0 AND NOT EXISTS (SELECT 1 FROM unnest(v_run.accounts, v_run.periods) AS r(account, period)
                                                        WHERE r.account = x.account AND r.period = x.period)
                   THEN h.from_run ELSE 0 END,
        spent = sp.spent + p_usd,
        resets = CASE WHEN agentsaga_spend_window(sp.period) IS NULL OR p_usd = 0 THEN sp.resets
                      ELSE greatest(sp.resets, clock_timestamp() + agentsaga_spend_window(sp.period)) END
    FROM unnest(h.accounts, h.periods, h.starts) AS x(account, period, starts)
    WHERE sp.account = x.account AND sp.period = x.period AND sp.starts = x.starts;
    IF v_release <> 0 THEN
        UPDATE spend_periods sp SET reserved = sp.reserved - v_release
        FROM unnest(v_run.accounts, v_run.periods, v_run.starts) AS x(account, period, starts)
        WHERE sp.account = x.account AND sp.period = x.period AND sp.starts = x.starts;
    END IF;
    INSERT INTO spend_entries (idempotency_key, account, usd) VALUES (p_key, h.account, p_usd)
    ON CONFLICT (idempotency_key) DO UPDATE
    SET usd = spend_entries.usd + excluded.usd, settled_at = excluded.settled_at;
    IF h.usd + v_release > p_usd
       AND EXISTS (SELECT 1 FROM run_admissions q
                   WHERE q.root = split_part(h.account, '/', 1) AND q.status = 'queued') THEN
        PERFORM pg_notify('agentsaga_admission', split_part(h.account, '/', 1));
    END IF;
    RETURN h.usd + h.from_run;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Ends the holds whose lease passed, as 00021's agentsaga_spend_expire
-- does; a call that reached the provider is spent in full, the part it
-- drew from its run's reservation included (from_run: settling it at its
-- own part alone would have spent nothing of a call its run paid for).
CREATE OR REPLACE FUNCTION agentsaga_spend_expire()
RETURNS TABLE (spent_in_full integer, released integer)
LANGUAGE plpgsql AS $$
DECLARE
    h      record;
    v_full integer := 0;
    v_free integer := 0;
BEGIN
    FOR h IN
        SELECT s.idempotency_key, s.usd + s.from_run AS usd,
               EXISTS (SELECT 1 FROM actions a WHERE a.idempotency_key = s.idempotency_key) AS claimed
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

-- +goose Down
-- The spend functions keep this migration's bodies, which read
-- run_admissions, spend_holds' new columns and agentsaga_key_runs: those
-- stay. With no run admitted, the bodies reserve and settle as 00023's do.
SELECT agentsaga_admission_end(run_id, 'migrated down') FROM run_admissions WHERE status IN ('queued', 'admitted');
DROP TRIGGER admission_accounts_changed ON admission_accounts;
DROP TRIGGER spend_caps_admission ON spend_caps;
DROP TRIGGER runs_admission_end ON runs;
DROP FUNCTION agentsaga_admission_limits_changed();
DROP FUNCTION agentsaga_admission_run_ended();
DROP FUNCTION agentsaga_admission_enqueue(text, text, text, text, integer, integer, numeric, bigint);
DROP FUNCTION agentsaga_admission_pass(text);
DROP FUNCTION agentsaga_admission_end(text, text);
DROP TABLE admission_accounts;
ALTER TABLE spend_caps DROP COLUMN admit;
UPDATE runs SET status = 'running' WHERE status = 'queued';
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('running', 'completed', 'partial', 'escalated', 'compensated', 'needs-attention', 'failed',
                      'terminated'));
