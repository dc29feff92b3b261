-- +goose Up

-- The fleet's shared retry state, as SQL functions. These functions are the
-- contract: a worker in any language (the Go worker, a Python or TypeScript
-- Temporal worker) pays for its retries by calling them, each in one round
-- trip, and every one is atomic on its own. All times come from the
-- database's clock_timestamp(), so no worker's clock matters.

-- One row per charge: a retry paid for (withdraw) or a success reported
-- (deposit). Temporal may deliver the same attempt twice, so each charge is
-- keyed by workflow ID, activity ID and attempt and happens at most once;
-- a repeated delivery gets the first delivery's decision back.
CREATE TABLE retry_charges (
    charge_key text PRIMARY KEY,
    kind       text NOT NULL CHECK (kind IN ('withdraw', 'deposit')),
    decision   text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A run's retries so far, in total and per tool, shared by every worker
-- that executes one of the run's calls (parallel calls of one turn pay
-- against the same row).
CREATE TABLE run_retry_counters (
    workflow_id  text PRIMARY KEY,
    retries      integer NOT NULL DEFAULT 0,
    tool_retries jsonb NOT NULL DEFAULT '{}'
);

-- +goose StatementBegin
-- The level a bucket row holds at p_now: what it held at p_updated_at plus
-- the refill since, capped at capacity. Time before p_updated_at (a clock
-- read taken before another transaction's later write) credits nothing.
-- Internal helper, inlined into the statements below.
CREATE FUNCTION agentsaga_bucket_refilled(p_tokens float8, p_capacity float8, p_refill float8,
                                          p_updated_at timestamptz, p_now timestamptz)
RETURNS float8
LANGUAGE sql IMMUTABLE
AS $$
    SELECT least(p_capacity,
                 p_tokens + p_refill * greatest(0, extract(epoch FROM p_now - p_updated_at)::float8))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Creates the bucket full, or changes an existing bucket's shape: the refill
-- earned so far is settled under the old rate and the level is capped at the
-- new capacity. Every worker may call it on start.
--   SELECT agentsaga_bucket_ensure('fleet', 40, 1, 0.1);
CREATE FUNCTION agentsaga_bucket_ensure(p_name text, p_capacity float8, p_refill float8, p_bonus float8)
RETURNS void
LANGUAGE sql
AS $$
    WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
    INSERT INTO retry_buckets AS b (name, capacity, refill_per_second, success_bonus, tokens, updated_at)
    SELECT p_name, p_capacity, p_refill, p_bonus, p_capacity, now.t FROM now
    ON CONFLICT (name) DO UPDATE
    SET capacity          = EXCLUDED.capacity,
        refill_per_second = EXCLUDED.refill_per_second,
        success_bonus     = EXCLUDED.success_bonus,
        tokens            = least(EXCLUDED.capacity,
                                  agentsaga_bucket_refilled(b.tokens, b.capacity, b.refill_per_second,
                                                            b.updated_at, EXCLUDED.updated_at)),
        updated_at        = greatest(b.updated_at, EXCLUDED.updated_at)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Takes p_cost tokens (default one) if the bucket holds them after refill;
-- returns whether it did. A missing bucket grants nothing. No idempotency:
-- retry hooks call agentsaga_retry_decide instead.
--   SELECT agentsaga_bucket_take('fleet');           -- true or false
--
-- Why K workers can never over-admit: this is ONE UPDATE statement, and the
-- row is only written when the WHERE clause holds. Under READ COMMITTED a
-- concurrent UPDATE of the same row makes this one wait for the row lock;
-- when the other transaction commits, Postgres re-evaluates the WHERE
-- clause on the newest row version (EvalPlanQual) with the same clock read,
-- so the refill and the >= p_cost test are recomputed from the tokens the
-- winner left, never from the stale version this statement first saw. If
-- they no longer suffice, no row is updated and the take is denied.
-- The clock is read once (the MATERIALIZED CTE), before any lock wait, so
-- it may be older than the winner's updated_at: greatest(0, ...) credits
-- nothing for that negative interval, and updated_at = greatest(updated_at,
-- now) never moves backwards, so no span of time is credited twice. The
-- only error is in the safe direction (a waiter may credit a few
-- microseconds too little).
CREATE FUNCTION agentsaga_bucket_take(p_name text, p_cost float8 DEFAULT 1)
RETURNS boolean
LANGUAGE sql
AS $$
    WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
    taken AS (
        UPDATE retry_buckets AS b
        SET tokens     = agentsaga_bucket_refilled(b.tokens, b.capacity, b.refill_per_second, b.updated_at, now.t) - p_cost,
            updated_at = greatest(b.updated_at, now.t)
        FROM now
        WHERE b.name = p_name
          AND agentsaga_bucket_refilled(b.tokens, b.capacity, b.refill_per_second, b.updated_at, now.t) >= p_cost
        RETURNING true AS ok
    )
    SELECT coalesce((SELECT ok FROM taken), false)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Puts p_amount tokens back (a success bonus, say), with the same refill
-- and capped at capacity, in one atomic UPDATE; returns the new level, or
-- NULL when the bucket does not exist. p_amount must not be negative.
--   SELECT agentsaga_bucket_deposit('fleet', 0.1);
CREATE FUNCTION agentsaga_bucket_deposit(p_name text, p_amount float8)
RETURNS float8
LANGUAGE sql
AS $$
    WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
    UPDATE retry_buckets AS b
    SET tokens     = least(b.capacity,
                           agentsaga_bucket_refilled(b.tokens, b.capacity, b.refill_per_second, b.updated_at, now.t) + p_amount),
        updated_at = greatest(b.updated_at, now.t)
    FROM now
    WHERE b.name = p_name
    RETURNING b.tokens
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The bucket's level now, refill included; writes nothing. NULL when the
-- bucket does not exist.
--   SELECT agentsaga_bucket_level('fleet');
CREATE FUNCTION agentsaga_bucket_level(p_name text)
RETURNS float8
LANGUAGE sql
AS $$
    SELECT agentsaga_bucket_refilled(tokens, capacity, refill_per_second, updated_at, clock_timestamp())
    FROM retry_buckets WHERE name = p_name
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Asks the dependency's breaker whether a call may go out, before making
-- it. Returns 'closed' (go), 'probe' (go: this call is the one probe of a
-- half-open breaker; report its outcome with p_probe = true) or 'open'
-- (do not call). The row is locked, so among any number of concurrent
-- callers exactly one gets 'probe'. A probe older than the cooldown is
-- taken as lost (its worker died) and the probe is re-armed.
--   SELECT agentsaga_breaker_allow('openai', 5000);
CREATE FUNCTION agentsaga_breaker_allow(p_dependency text, p_cooldown_ms float8)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_cooldown interval := p_cooldown_ms * interval '1 millisecond';
    r          circuit_breakers%ROWTYPE;
BEGIN
    SELECT * INTO r FROM circuit_breakers WHERE dependency = p_dependency FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO circuit_breakers (dependency) VALUES (p_dependency) ON CONFLICT DO NOTHING;
        SELECT * INTO r FROM circuit_breakers WHERE dependency = p_dependency FOR UPDATE;
    END IF;

    IF r.state = 'closed' THEN
        RETURN 'closed';
    END IF;
    IF r.state = 'open' AND (r.opened_at IS NULL OR v_now - r.opened_at >= v_cooldown) THEN
        UPDATE circuit_breakers SET state = 'half-open', probe_in_flight = true, updated_at = v_now
        WHERE dependency = p_dependency;
        RETURN 'probe';
    END IF;
    IF r.state = 'half-open' AND (NOT r.probe_in_flight OR v_now - r.updated_at >= v_cooldown) THEN
        UPDATE circuit_breakers SET probe_in_flight = true, updated_at = v_now
        WHERE dependency = p_dependency;
        RETURN 'probe';
    END IF;
    RETURN 'open';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Reports a call's outcome to the dependency's breaker; returns its new
-- state ('closed', 'open' or 'half-open'). Closed: a failure counts within
-- a window of p_window_ms (an older window starts over) and the
-- p_threshold-th failure opens the breaker; a success changes nothing.
-- Half-open: the probe's success (p_probe = true) closes it, the probe's
-- failure opens it again for another cooldown; other outcomes are ignored,
-- as is everything reported while open.
--   SELECT agentsaga_breaker_record('openai', false, false, 5, 10000);
CREATE FUNCTION agentsaga_breaker_record(p_dependency text, p_success boolean, p_probe boolean,
                                         p_threshold int, p_window_ms float8)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_window   interval := p_window_ms * interval '1 millisecond';
    v_failures integer;
    r          circuit_breakers%ROWTYPE;
BEGIN
    SELECT * INTO r FROM circuit_breakers WHERE dependency = p_dependency FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO circuit_breakers (dependency) VALUES (p_dependency) ON CONFLICT DO NOTHING;
        SELECT * INTO r FROM circuit_breakers WHERE dependency = p_dependency FOR UPDATE;
    END IF;

    IF r.state = 'closed' THEN
        IF p_success THEN
            RETURN 'closed';
        END IF;
        IF r.failures = 0 OR v_now - r.window_started_at > v_window THEN
            r.failures := 0;
            r.window_started_at := v_now;
        END IF;
        v_failures := r.failures + 1;
        IF v_failures >= p_threshold THEN
            UPDATE circuit_breakers
            SET state = 'open', failures = v_failures, window_started_at = r.window_started_at,
                opened_at = v_now, probe_in_flight = false, updated_at = v_now
            WHERE dependency = p_dependency;
            RETURN 'open';
        END IF;
        UPDATE circuit_breakers
        SET failures = v_failures, window_started_at = r.window_started_at, updated_at = v_now
        WHERE dependency = p_dependency;
        RETURN 'closed';
    END IF;

    IF r.state = 'half-open' AND p_probe THEN
        IF p_success THEN
            UPDATE circuit_breakers
            SET state = 'closed', failures = 0, window_started_at = v_now, opened_at = NULL,
                probe_in_flight = false, updated_at = v_now
            WHERE dependency = p_dependency;
            RETURN 'closed';
        END IF;
        UPDATE circuit_breakers
        SET state = 'open', opened_at = v_now, probe_in_flight = false, updated_at = v_now
        WHERE dependency = p_dependency;
        RETURN 'open';
    END IF;

    RETURN r.state;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The retry hook's payment, atomically, after a retryable failure: call it
-- once per failed attempt with p_charge_key = workflow ID/activity ID/attempt.
-- Returns 'granted' or the budget that said no, checked in this order:
--   'ToolRetryCapReached'   the run's retries of p_tool reached p_tool_cap
--   'RunRetryBudgetSpent'   the run's retries reached p_run_allowance
--   'CircuitOpen'           p_dependency's breaker is open
--   'RetryBudgetExhausted'  the fleet bucket p_bucket holds no token
-- Only 'granted' charges anything (one token, one run retry, one retry of
-- p_tool). The same charge key again returns the first decision and
-- charges nothing. A bucket that does not exist raises no_data_found
-- (create it with agentsaga_bucket_ensure first); an empty p_dependency
-- skips the breaker.
--   SELECT agentsaga_retry_decide('wf-1/5/2', 'wf-1', 'search', 3, 4.5, 'fleet', 'openai');
-- Locks, in order: the charge row, the run's counters, the bucket row.
CREATE FUNCTION agentsaga_retry_decide(p_charge_key text, p_workflow_id text, p_tool text, p_tool_cap int,
                                       p_run_allowance float8, p_bucket text, p_dependency text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_decision text;
    v_retries  integer;
    v_tool     integer;
BEGIN
    -- (1) Idempotency. A concurrent duplicate waits here on the key until
    -- the first delivery commits, then reads its decision.
    INSERT INTO retry_charges (charge_key, kind) VALUES (p_charge_key, 'withdraw')
    ON CONFLICT (charge_key) DO NOTHING;
    IF NOT FOUND THEN
        SELECT decision INTO v_decision FROM retry_charges WHERE charge_key = p_charge_key;
        RETURN v_decision;
    END IF;

    -- (2) The run's counters, locked so parallel calls of a run pay in turn.
    INSERT INTO run_retry_counters (workflow_id) VALUES (p_workflow_id) ON CONFLICT DO NOTHING;
    SELECT retries, coalesce((tool_retries ->> p_tool)::integer, 0) INTO v_retries, v_tool
    FROM run_retry_counters WHERE workflow_id = p_workflow_id FOR UPDATE;

    IF v_tool >= p_tool_cap THEN
        v_decision := 'ToolRetryCapReached';
    -- (3) The run's retry ratio.
    ELSIF v_retries >= p_run_allowance THEN
        v_decision := 'RunRetryBudgetSpent';
    -- (4) An open breaker denies outright (its cooldown is the next call's
    -- business, through agentsaga_breaker_allow).
    ELSIF coalesce(p_dependency, '') <> '' AND EXISTS (
            SELECT 1 FROM circuit_breakers WHERE dependency = p_dependency AND state = 'open') THEN
        v_decision := 'CircuitOpen';
    -- (5) The fleet bucket.
    ELSIF NOT agentsaga_bucket_take(p_bucket, 1) THEN
        IF NOT EXISTS (SELECT 1 FROM retry_buckets WHERE name = p_bucket) THEN
            RAISE EXCEPTION 'agentsaga_retry_decide: retry bucket % does not exist', p_bucket
                USING ERRCODE = 'no_data_found';
        END IF;
        v_decision := 'RetryBudgetExhausted';
    ELSE
        UPDATE run_retry_counters
        SET retries = retries + 1,
            tool_retries = jsonb_set(tool_retries, ARRAY[p_tool], to_jsonb(v_tool + 1))
        WHERE workflow_id = p_workflow_id;
        v_decision := 'granted';
    END IF;

    UPDATE retry_charges SET decision = v_decision WHERE charge_key = p_charge_key;
    RETURN v_decision;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Reports a successful attempt: deposits p_bonus into p_bucket (NULL means
-- the bucket's own success_bonus) and tells p_dependency's breaker (pass
-- p_probe = true when agentsaga_breaker_allow answered 'probe'). Once per
-- charge key (workflow ID/activity ID/attempt): a repeated delivery does
-- nothing. The deposit is recorded under 'deposit:' || p_charge_key, so it
-- never collides with a withdrawal under the same key. An empty p_bucket or
-- p_dependency skips that part.
--   SELECT agentsaga_record_success('wf-1/5/3', 'fleet', 0.1, 'openai', false);
CREATE FUNCTION agentsaga_record_success(p_charge_key text, p_bucket text, p_bonus float8,
                                         p_dependency text, p_probe boolean)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_bonus float8;
BEGIN
    INSERT INTO retry_charges (charge_key, kind, decision) VALUES ('deposit:' || p_charge_key, 'deposit', 'deposited')
    ON CONFLICT (charge_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF coalesce(p_bucket, '') <> '' THEN
        v_bonus := coalesce(p_bonus, (SELECT success_bonus FROM retry_buckets WHERE name = p_bucket), 0);
        IF v_bonus > 0 THEN
            PERFORM agentsaga_bucket_deposit(p_bucket, v_bonus);
        END IF;
    END IF;
    IF coalesce(p_dependency, '') <> '' THEN
        -- Threshold and window only matter for failures.
        PERFORM agentsaga_breaker_record(p_dependency, true, p_probe, 1, 1);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_record_success(text, text, float8, text, boolean);
DROP FUNCTION agentsaga_retry_decide(text, text, text, int, float8, text, text);
DROP FUNCTION agentsaga_breaker_record(text, boolean, boolean, int, float8);
DROP FUNCTION agentsaga_breaker_allow(text, float8);
DROP FUNCTION agentsaga_bucket_level(text);
DROP FUNCTION agentsaga_bucket_deposit(text, float8);
DROP FUNCTION agentsaga_bucket_take(text, float8);
DROP FUNCTION agentsaga_bucket_ensure(text, float8, float8, float8);
DROP FUNCTION agentsaga_bucket_refilled(float8, float8, float8, timestamptz, timestamptz);
DROP TABLE run_retry_counters;
DROP TABLE retry_charges;
