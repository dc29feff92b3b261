-- +goose Up

-- The backlog and the fresh calls share one paced line while a drain is on
-- (issue 46, item 7). 00033 spaced the release slots at what the fresh
-- demand left of the rate, but that demand is an average over the outage,
-- measured before the breaker closed, and its seconds vary (2 to 9 new
-- calls a second in `agentsaga bench storm` on a loaded machine): a second
-- of 8 new calls plus the released ones met 503s, and recovery took 4 to
-- 6 s. The line now follows the seconds instead:
--
-- - the gate, when it answers closed while parked calls still have slots
--   ahead (release_next is later than now: a drain is on), says until when
--   (retry_at, which a closed answer left NULL), and a call's first send
--   during the drain books a place in the line before it goes;
-- - a fresh call goes at once, never held back, and moves the line on by a
--   ninth more than a released call's place (the tenth of headroom of
--   00033, now over the seconds the fresh calls really take), but never to
--   more than a second past now: the line remembers the last second's
--   demand, not a flood's;
-- - a released call books only when the line is free now; otherwise it is
--   told when to ask again (booked false), and it waits in its worker. (A
--   booking up to one place ahead, as a drain alone would allow, let two
--   released calls into a second beside 8 fresh ones: 10 on a service that
--   takes 10.) So the backlog goes in the room the fresh calls
--   left in the moments just gone, second by second, and the dependency
--   sees at most about the rate in all.
--
-- The 7-argument pace of 00018 stays, for the workers of older builds (their
-- released calls book ahead of the fresh ones, as before) and as the
-- booking itself: the 8-argument one books through it, so the adaptive
-- rate is learned in one place. The gate is 00033's with the drain's end
-- on a closed answer; workers of older builds read no retry_at there.
--   SELECT * FROM agentsaga_breaker_pace('tool:crm', 0, 3, 10, 0.2, 20, 0.05, false);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_breaker_gate(p_dependency text, p_cooldown_ms float8, p_release_interval_ms float8,
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
    IF state = 'closed' AND r.release_next > v_now THEN
        -- Parked calls come back until then: the fresh ones share the line.
        retry_at := r.release_next;
    END IF;
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

-- A place in the dependency's paced line during a drain: a fresh call's
-- (p_fresh), which goes now, or a released call's, which is booked (by
-- 00018's pace, with its successes) only when the line is free now, and is
-- otherwise told when to ask again.
-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_pace(p_dependency text, p_release_interval_ms float8, p_successes integer,
                                       p_start float8, p_floor float8, p_ceiling float8, p_step float8,
                                       p_fresh boolean, OUT leave_at timestamptz, OUT booked boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_gap interval;
    r     circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_release_check(p_start, p_floor, p_ceiling);
    IF p_release_interval_ms IS NULL OR p_release_interval_ms < 0 OR p_successes IS NULL OR p_successes < 0
       OR p_step IS NULL OR p_step < 0 OR p_fresh IS NULL THEN
        RAISE EXCEPTION 'agentsaga_breaker_pace: the release interval % ms, the successes % and the step % must not be negative, and fresh % not null',
            p_release_interval_ms, p_successes, p_step, p_fresh
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    leave_at := v_now;
    booked := true;
    SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    IF NOT FOUND THEN
        RETURN; -- no breaker, no line
    END IF;
    v_gap := CASE WHEN p_release_interval_ms > 0 THEN p_release_interval_ms
                  ELSE 1000 / agentsaga_release_rate(r.release_rate, p_start, p_floor, p_ceiling) END
             * interval '1 millisecond';
    IF p_fresh THEN
        UPDATE circuit_breakers b
        SET paced_until = greatest(b.paced_until,
                                   least(greatest(b.paced_until, v_now) + v_gap / 0.9, v_now + interval '1 second'))
        WHERE b.dependency = p_dependency;
        RETURN;
    END IF;
    IF r.paced_until > v_now THEN
        leave_at := r.paced_until;
        booked := false;
        RETURN;
    END IF;
    leave_at := agentsaga_breaker_pace(p_dependency, p_release_interval_ms, p_successes, p_start, p_floor, p_ceiling, p_step);
    booked := true;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- The gate keeps this body: older workers read no retry_at on a closed
-- answer.
DROP FUNCTION agentsaga_breaker_pace(text, float8, integer, float8, float8, float8, float8, boolean);
