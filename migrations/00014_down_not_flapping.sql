-- +goose Up

-- A breaker opens when its dependency is down, not when it flaps (DESIGN
-- decision 12). Down: the dependency's last p_threshold requests, fleet-wide,
-- all failed retryably, with no success between them, the streak no older
-- than p_window_ms. Flapping (some requests succeed) never opens it: that is
-- the retry budget's business. 00002's agentsaga_breaker_record counted
-- failures in a window and ignored successes, so a search backend failing 2
-- requests in 3 opened its breaker after a few topics, and whether it did
-- depended on what else had failed in the last 30 s.
--
-- A failure that opens the breaker, or is refused by it, also says since when
-- the outage has lasted (open_since, as 00012's gate does for the calls it
-- refuses): a run alone never meets the gate while it waits, only its own
-- failed probes, and escalate.after_breaker_open_seconds measures the outage.
--
-- A success resets the streak. Reporting every success would cost a healthy
-- call a statement, so workers report one only when they know of a streak:
-- the 4-argument gate below tells them (failures > 0 while closed), as does
-- their own failure's report. A worker trusts a gate's answer for at most
-- activities.BreakerStaleness, so a success on another worker may go
-- unreported for that long: the streak then counts failures that a success
-- separated, which errs toward parking calls, never toward sending them.
--   SELECT * FROM agentsaga_breaker_report('tool:crm', false, false, 3, 30000);
-- 00002's function stays, unchanged, for the workers of older builds.

-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_report(p_dependency text, p_success boolean, p_probe boolean,
                                         p_threshold int, p_window_ms float8,
                                         OUT state text, OUT failures integer, OUT open_since timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := clock_timestamp();
    v_window interval := p_window_ms * interval '1 millisecond';
    r        circuit_breakers%ROWTYPE;
BEGIN
    SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    IF NOT FOUND THEN
        IF p_success THEN
            state := 'closed';
            failures := 0;
            RETURN;
        END IF;
        INSERT INTO circuit_breakers (dependency) VALUES (p_dependency) ON CONFLICT DO NOTHING;
        SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    END IF;

    IF r.state = 'closed' THEN
        IF p_success THEN
            IF r.failures > 0 THEN
                UPDATE circuit_breakers b SET failures = 0, window_started_at = v_now, updated_at = v_now
                WHERE b.dependency = p_dependency;
            END IF;
            state := 'closed';
            failures := 0;
            RETURN;
        END IF;
        IF r.failures = 0 OR v_now - r.window_started_at > v_window THEN
            r.failures := 0;
            r.window_started_at := v_now;
        END IF;
        failures := r.failures + 1;
        IF failures >= p_threshold THEN
            open_since := v_now;
            UPDATE circuit_breakers b
            SET state = 'open', failures = agentsaga_breaker_report.failures, window_started_at = r.window_started_at,
                opened_at = v_now, probe_in_flight = false, updated_at = v_now,
                open_since = agentsaga_breaker_report.open_since
            WHERE b.dependency = p_dependency;
            state := 'open';
            RETURN;
        END IF;
        UPDATE circuit_breakers b
        SET failures = agentsaga_breaker_report.failures, window_started_at = r.window_started_at, updated_at = v_now
        WHERE b.dependency = p_dependency;
        state := 'closed';
        RETURN;
    END IF;

    failures := 0;
    -- An open_since older than the streak that opened the breaker is an
    -- earlier outage's (see 00012); a breaker opened by an older worker has
    -- none, and its last opening stands in.
    open_since := r.open_since;
    IF open_since IS NULL OR open_since < r.window_started_at THEN
        open_since := coalesce(r.opened_at, v_now);
    END IF;
    IF r.state = 'half-open' AND p_probe THEN
        IF p_success THEN
            open_since := NULL;
            UPDATE circuit_breakers b
            SET state = 'closed', failures = 0, window_started_at = v_now, opened_at = NULL,
                probe_in_flight = false, updated_at = v_now
            WHERE b.dependency = p_dependency;
            state := 'closed';
            RETURN;
        END IF;
        UPDATE circuit_breakers b
        SET state = 'open', opened_at = v_now, probe_in_flight = false, updated_at = v_now,
            open_since = agentsaga_breaker_report.open_since
        WHERE b.dependency = p_dependency;
        state := 'open';
        RETURN;
    END IF;
    state := r.state;
END
$$;
-- +goose StatementEnd

-- The gate of 00012, which also says, of a closed breaker, how long the
-- current streak of failures is (0 once it is older than p_window_ms), so
-- that a worker knows its next success must be reported. A closed breaker is
-- still read without a lock; anything else is 00012's gate.
--   SELECT * FROM agentsaga_breaker_gate('tool:crm', 5000, 500, 30000);
-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_gate(p_dependency text, p_cooldown_ms float8, p_release_interval_ms float8,
                                       p_window_ms float8,
                                       OUT state text, OUT retry_at timestamptz, OUT open_since timestamptz,
                                       OUT failures integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_state   text;
    v_started timestamptz;
BEGIN
    failures := 0;
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
    SELECT g.state, g.retry_at, g.open_since INTO state, retry_at, open_since
    FROM agentsaga_breaker_gate(p_dependency, p_cooldown_ms, p_release_interval_ms) g;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_breaker_gate(text, float8, float8, float8);
DROP FUNCTION agentsaga_breaker_report(text, boolean, boolean, int, float8);
