-- +goose Up

-- A backlog drains into what the fresh calls leave of its dependency
-- (issue 46, item 7). Until now an open breaker spaced its parked calls'
-- release slots at the dependency's whole rate (declared, or the adaptive
-- rate of 00018, which starts at 10 a second), as if the parked calls
-- were all the dependency would get once it came back. But new calls keep
-- arriving, and once the breaker has closed they go at once: in
-- `agentsaga bench storm`, 8 new calls a second on a service that takes
-- 10, the backlog came back at 10 a second on top of them, 18 a second
-- met 503s, three in a row opened the breaker again, and the errors took
-- 5 to 23 s to stay under 1% (1 s when the slots were 2 a second).
--
-- The gate sees the fresh demand while the breaker is open: every new
-- call meets it once, at its first send (the retry hook says which send
-- is a first one; a parked call sent again is not). It counts them per
-- outage, in the breaker row: fresh_count, the first sends it refused
-- from fresh_from plus a window (the cooldown) on, fresh_from, its first
-- refusal of a first send in this outage, and fresh_window, the
-- window_started_at of the outage they belong to (as 00020's
-- failed_probes_window: a count of an earlier outage counts for nothing,
-- and nothing needs to reset it). The first window is not counted: a
-- burst of calls that met the outage together is a backlog, not a rate
-- that will go on (`agentsaga bench drain`: 150 calls at once, then none).
-- From two windows into the outage, the fresh demand is the count over
-- the time since the first window ended, and the gate spaces release
-- slots at what it leaves of nine tenths of the rate: 0.9 rate - demand,
-- never below the floor (one release per cooldown). The tenth is
-- headroom: the demand is an average, and its seconds vary (5 to 8 in the
-- storm's, whose average is 7.5), so a backlog that filled the rest of
-- the rate would meet 503s in the seconds above it, as the first runs of
-- this change did (10, 11 and 12 requests in the seconds after the
-- outage, against 10). Before that, and with no fresh demand, the slots
-- are spaced as 00020 spaces them.
--
-- The new gate is 00020's, called with the interval this computes; it
-- changes nothing else. 00020's 9-argument gate stays, unchanged, for the
-- workers of older builds: their refusals count no fresh demand.
--   SELECT * FROM agentsaga_breaker_gate('tool:crm', 5000, 0, 30000, 10, 0.2, 20, 60000, 6, true);
ALTER TABLE circuit_breakers
    ADD COLUMN fresh_count integer NOT NULL DEFAULT 0,
    ADD COLUMN fresh_from timestamptz,
    ADD COLUMN fresh_window timestamptz;

-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_gate(p_dependency text, p_cooldown_ms float8, p_release_interval_ms float8,
                                       p_window_ms float8, p_start float8, p_floor float8, p_ceiling float8,
                                       p_max_cooldown_ms float8, p_steady_probes integer, p_first_send boolean,
                                       OUT state text, OUT retry_at timestamptz, OUT open_since timestamptz,
                                       OUT failures integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_window  interval := p_cooldown_ms * interval '1 millisecond';
    v_release float8 := p_release_interval_ms;
    v_rate    float8;
    v_demand  float8 := 0;
    r         circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_release_check(p_start, p_floor, p_ceiling);
    PERFORM agentsaga_probe_check(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes);
    -- Read without a lock: the count is an estimate, and a closed breaker
    -- (the common case) is left to 00020's gate, which reads it so too.
    SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency;
    IF FOUND AND r.state <> 'closed' AND r.fresh_window = r.window_started_at
       AND v_now >= r.fresh_from + 2 * v_window THEN
        v_demand := r.fresh_count / extract(epoch FROM v_now - (r.fresh_from + v_window));
    END IF;
    IF v_demand > 0 AND p_release_interval_ms >= 0 THEN
        v_rate := CASE WHEN p_release_interval_ms > 0 THEN 1000 / p_release_interval_ms
                       ELSE agentsaga_release_rate(r.release_rate, p_start, p_floor, p_ceiling) END;
        v_release := 1000 / greatest(p_floor, 0.9 * v_rate - v_demand);
    END IF;
    SELECT g.state, g.retry_at, g.open_since, g.failures INTO state, retry_at, open_since, failures
    FROM agentsaga_breaker_gate(p_dependency, p_cooldown_ms, v_release, p_window_ms, p_start, p_floor, p_ceiling,
                                p_max_cooldown_ms, p_steady_probes) g;
    IF p_first_send AND state = 'open' THEN
        -- The row is locked: 00020's gate locked it to hand out the slot.
        UPDATE circuit_breakers b
        SET fresh_window = b.window_started_at,
            fresh_from = CASE WHEN b.fresh_window = b.window_started_at THEN b.fresh_from ELSE v_now END,
            fresh_count = CASE WHEN b.fresh_window IS DISTINCT FROM b.window_started_at THEN 0
                               WHEN v_now >= b.fresh_from + v_window THEN b.fresh_count + 1
                               ELSE b.fresh_count END
        WHERE b.dependency = p_dependency;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_breaker_gate(text, float8, float8, float8, float8, float8, float8, float8, integer, boolean);
ALTER TABLE circuit_breakers DROP COLUMN fresh_count, DROP COLUMN fresh_from, DROP COLUMN fresh_window;
