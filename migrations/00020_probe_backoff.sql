-- +goose Up

-- A long outage is probed less often (issue 30). Until now an open breaker
-- let a probe out every cooldown however long its dependency had been
-- down: a run whose only tool stayed down sent it 41 requests before its
-- escalation at 300 s, every one of them failing. Now each failed probe of
-- an outage opens the breaker again for a probe interval that grows with
-- the outage's failed probes: the cooldown for the first p_steady_probes,
-- then doubling with each, up to p_max_cooldown_ms (budget.BreakerConfig's
-- ProbeInterval says the same in Go, and DefaultBreaker why its numbers
-- are what they are). A probe that succeeds closes the breaker, and the
-- next outage starts again at the cooldown.
--
-- The count is in the breaker row: failed_probes, the outage's failed
-- probes in a row, and failed_probes_window, the window_started_at of the
-- outage they belong to. Every opening from closed starts a streak with a
-- window_started_at of its own, and closing moves it too (00014), so a
-- count whose window is not the row's is an earlier outage's and counts 0:
-- nothing needs to reset it, and a breaker opened or closed by a worker of
-- an older build, which knows nothing of the count, starts again at the
-- cooldown. Only the report of a failed probe writes it, in the statement
-- that opens the breaker again.
--
-- The gate lets the next probe out once the probe interval has passed
-- since the breaker's last opening, and a refused call's release slot is
-- no earlier than that probe, so the calls parked behind a long outage
-- wake once a probe interval, not once a cooldown. A probe in flight for
-- longer than the probe interval (its caller crashed, or the service hangs
-- rather than fails) is replaced then, as it was after a cooldown. The
-- report of a failure that finds or leaves the breaker open says when its
-- next probe is (retry_at), so that the failed call, the probe's included,
-- parks until then rather than for a cooldown.
--
-- The release rate (00018) is unchanged: the new gate spaces the release
-- slots at the declared interval or at the rate learned, and the new report
-- is 00018's, which cuts it, with the count beside.
--   SELECT * FROM agentsaga_breaker_gate('tool:crm', 5000, 0, 30000, 10, 0.2, 20, 60000, 6);
--   SELECT * FROM agentsaga_breaker_report('tool:crm', false, true, 3, 30000, 10, 0.2, 20, 1000, 5000, 60000, 6);
-- 00018's 7-argument gate and 9-argument report stay, unchanged, for the
-- workers of older builds: their gates probe once per cooldown.
ALTER TABLE circuit_breakers
    ADD COLUMN failed_probes integer NOT NULL DEFAULT 0,
    ADD COLUMN failed_probes_window timestamptz;

-- +goose StatementBegin
-- The probe interval, in milliseconds, after p_failed failed probes of an
-- outage: p_cooldown_ms for the first p_steady, then doubling, up to
-- p_max_cooldown_ms. The exponent is capped so that a count in the
-- thousands cannot overflow a float8.
CREATE FUNCTION agentsaga_probe_interval(p_cooldown_ms float8, p_max_cooldown_ms float8, p_steady integer, p_failed integer)
RETURNS float8
LANGUAGE sql IMMUTABLE
AS $$
    SELECT least(p_max_cooldown_ms,
                 p_cooldown_ms * 2 ^ least(greatest(coalesce(p_failed, 0) - p_steady, 0), 60))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Rejects a probe backoff that could not shape an interval.
CREATE FUNCTION agentsaga_probe_check(p_cooldown_ms float8, p_max_cooldown_ms float8, p_steady integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_cooldown_ms IS NULL OR p_max_cooldown_ms IS NULL OR p_steady IS NULL
       OR NOT (p_cooldown_ms > 0 AND p_max_cooldown_ms >= p_cooldown_ms AND p_steady >= 0) THEN
        RAISE EXCEPTION 'probe backoff: cooldown % ms, max cooldown % ms and steady probes % must be positive, in that order, and not negative',
            p_cooldown_ms, p_max_cooldown_ms, p_steady
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- +goose StatementEnd

-- 00018's gate, whose open breaker lets its next probe out a probe
-- interval after its last opening, not a cooldown, and hands a refused
-- call a release slot no earlier than that probe. A closed breaker is still
-- read without a lock; anything else is 00012's gate with the probe
-- interval in place of the cooldown (a probe in flight is looked at again
-- within a second, or the cooldown when that is shorter, as there).
-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_gate(p_dependency text, p_cooldown_ms float8, p_release_interval_ms float8,
                                       p_window_ms float8, p_start float8, p_floor float8, p_ceiling float8,
                                       p_max_cooldown_ms float8, p_steady_probes integer,
                                       OUT state text, OUT retry_at timestamptz, OUT open_since timestamptz,
                                       OUT failures integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz;
    v_cooldown interval := p_cooldown_ms * interval '1 millisecond';
    v_wait     interval;
    v_release  float8 := p_release_interval_ms;
    v_state    text;
    v_started  timestamptz;
    v_probe    timestamptz;
    r          circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_release_check(p_start, p_floor, p_ceiling);
    PERFORM agentsaga_probe_check(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes);
    IF v_release IS NULL OR v_release < 0 THEN
        RAISE EXCEPTION 'agentsaga_breaker_gate: the release interval % ms must not be negative', p_release_interval_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    failures := 0;
    -- A closed breaker is read without a lock (see 00005 and 00014).
    SELECT b.state, b.failures, b.window_started_at INTO v_state, failures, v_started
    FROM circuit_breakers b WHERE b.dependency = p_dependency;
    IF NOT FOUND THEN
        state := 'closed';
        failures := 0;
        RETURN;
    END IF;
    IF v_state = 'closed' THEN
        state := 'closed';
        IF v_started IS NULL OR clock_timestamp() - v_started > p_window_ms * interval '1 millisecond' THEN
            failures := 0;
        END IF;
        RETURN;
    END IF;
    failures := 0;

    SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    v_now := clock_timestamp();
    IF r.state = 'closed' THEN
        state := 'closed';
        RETURN;
    END IF;
    v_wait := agentsaga_probe_interval(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes,
                  CASE WHEN r.failed_probes_window = r.window_started_at THEN r.failed_probes ELSE 0 END)
              * interval '1 millisecond';
    IF r.state = 'open' AND (r.opened_at IS NULL OR v_now - r.opened_at >= v_wait) THEN
        UPDATE circuit_breakers b SET state = 'half-open', probe_in_flight = true, updated_at = v_now
        WHERE b.dependency = p_dependency;
        state := 'probe';
        RETURN;
    END IF;
    IF r.state = 'half-open' AND (NOT r.probe_in_flight OR v_now - r.updated_at >= v_wait) THEN
        UPDATE circuit_breakers b SET probe_in_flight = true, updated_at = v_now
        WHERE b.dependency = p_dependency;
        state := 'probe';
        RETURN;
    END IF;
    state := 'open';
    IF r.state = 'open' THEN
        v_probe := r.opened_at + v_wait;
    ELSE
        v_probe := least(r.updated_at + v_wait, v_now + least(v_cooldown, interval '1 second'));
    END IF;
    IF v_release = 0 THEN
        v_release := 1000 / agentsaga_release_rate(r.release_rate, p_start, p_floor, p_ceiling);
    END IF;
    retry_at := greatest(v_probe, coalesce(r.release_next, v_probe));
    open_since := r.open_since;
    IF open_since IS NULL OR open_since < r.window_started_at THEN
        open_since := coalesce(r.opened_at, v_now);
    END IF;
    UPDATE circuit_breakers b
    SET release_next = retry_at + v_release * interval '1 millisecond', open_since = agentsaga_breaker_gate.open_since
    WHERE b.dependency = p_dependency;
END
$$;
-- +goose StatementEnd

-- 00018's report, which also counts a failed probe toward the outage's
-- probe interval (the failure that opens the breaker again) and says,
-- when the breaker is open after the report, when it lets its next probe
-- out (retry_at: its last opening plus the probe interval).
-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_report(p_dependency text, p_success boolean, p_probe boolean,
                                         p_threshold int, p_window_ms float8,
                                         p_start float8, p_floor float8, p_ceiling float8, p_hold_ms float8,
                                         p_cooldown_ms float8, p_max_cooldown_ms float8, p_steady_probes integer,
                                         OUT state text, OUT failures integer, OUT open_since timestamptz,
                                         OUT retry_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    r circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_probe_check(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes);
    IF NOT p_success THEN
        -- Locked before 00018's report changes it, so that the reopening
        -- and the count are one change of the row.
        SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    END IF;
    SELECT x.state, x.failures, x.open_since INTO state, failures, open_since
    FROM agentsaga_breaker_report(p_dependency, p_success, p_probe, p_threshold, p_window_ms,
                                  p_start, p_floor, p_ceiling, p_hold_ms) x;
    IF p_success OR state <> 'open' THEN
        RETURN;
    END IF;
    IF p_probe AND r.state = 'half-open' THEN
        -- The probe failed and opened the breaker again: one more failed
        -- probe of this outage (window_started_at is the outage's: a
        -- failed probe does not move it).
        UPDATE circuit_breakers b
        SET failed_probes = CASE WHEN r.failed_probes_window = r.window_started_at THEN r.failed_probes ELSE 0 END + 1,
            failed_probes_window = r.window_started_at
        WHERE b.dependency = p_dependency;
    END IF;
    SELECT b.opened_at + agentsaga_probe_interval(p_cooldown_ms, p_max_cooldown_ms, p_steady_probes,
                             CASE WHEN b.failed_probes_window = b.window_started_at THEN b.failed_probes ELSE 0 END)
                         * interval '1 millisecond'
    INTO retry_at
    FROM circuit_breakers b WHERE b.dependency = p_dependency;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_breaker_report(text, boolean, boolean, int, float8, float8, float8, float8, float8, float8, float8, integer);
DROP FUNCTION agentsaga_breaker_gate(text, float8, float8, float8, float8, float8, float8, float8, integer);
DROP FUNCTION agentsaga_probe_check(float8, float8, integer);
DROP FUNCTION agentsaga_probe_interval(float8, float8, integer, integer);
ALTER TABLE circuit_breakers DROP COLUMN failed_probes, DROP COLUMN failed_probes_window;
