-- +goose Up

-- A dependency that declares no rate gets its backlog back at a rate it
-- learns, not at a fixed interval (DESIGN decision 13, issue 22). Until
-- now the gate spaced the release slots of an open breaker's queue (00012),
-- and the paced line spaced the released calls (00017), at a tenth of the
-- cooldown, 2 a second: a service that takes 10 a second drained a
-- 150-call backlog in 76 s instead of 15 (`agentsaga bench drain`).
--
-- The rate, in releases a second, is the dependency's, in its breaker row:
-- release_rate (NULL until something is learned: the caller's start rate
-- stands in), release_peak (the rate at the last cut) and
-- release_hold_until (no cut before it). It changes only inside the
-- statements that already run, each atomic on the row:
-- - a released call's booking in the paced line (agentsaga_breaker_pace)
--   carries the successes of released calls its worker saw since its last
--   booking; while the line is in use (this call waits for its place, so
--   the rate is what holds the calls back), each adds p_step (additive
--   increase), or, below release_peak (nine tenths of the rate the last cut
--   was made at: that rate failed), a tenth of the way back to it when
--   that is more. A success of a call that did not wait says nothing about
--   a higher rate, and adds nothing. A healthy call reports nothing: the
--   success path keeps its two statements;
-- - a retryable failure reported to the breaker (agentsaga_breaker_report)
--   while the line is in use (a call was booked in the last p_hold_ms)
--   halves the rate (multiplicative decrease): the failure that opens the
--   breaker again after a drain is one of them. Once per congestion: no
--   cut again until the calls booked at the old rate have left and
--   p_hold_ms has passed;
-- - the gate (agentsaga_breaker_gate) spaces an open breaker's release
--   slots at the rate learned so far. A parked call's timer is set when it
--   is refused, so a drain runs at most at the rate of the outage's time;
--   what it learns spaces the next one.
-- The rate stays within p_floor and p_ceiling, which the caller states
-- with its start (budget.AdaptiveRelease says why each is what it is). A
-- declared rate (p_release_interval_ms > 0) still wins and leaves the
-- learned rate alone.
ALTER TABLE circuit_breakers
    ADD COLUMN release_rate float8,
    ADD COLUMN release_peak float8,
    ADD COLUMN release_hold_until timestamptz;

-- +goose StatementBegin
-- The rate in force: the learned one, or p_start before anything was
-- learned, within p_floor and p_ceiling.
CREATE FUNCTION agentsaga_release_rate(p_rate float8, p_start float8, p_floor float8, p_ceiling float8)
RETURNS float8
LANGUAGE sql IMMUTABLE
AS $$ SELECT least(p_ceiling, greatest(p_floor, coalesce(p_rate, p_start))) $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Rejects bounds that could not shape a rate.
CREATE FUNCTION agentsaga_release_check(p_start float8, p_floor float8, p_ceiling float8)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_floor IS NULL OR p_start IS NULL OR p_ceiling IS NULL
       OR NOT (p_floor > 0 AND p_floor <= p_start AND p_start <= p_ceiling) THEN
        RAISE EXCEPTION 'adaptive release: floor %, start % and ceiling % must be positive and in that order', p_floor, p_start, p_ceiling
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
END
$$;
-- +goose StatementEnd

-- The gate of 00014, whose refused calls take release slots spaced at the
-- declared interval, or, with p_release_interval_ms 0, at the learned
-- rate. A closed breaker is still read without a lock; the rate is read
-- with its state, and a cut that lands between the read and the slot is
-- seen by the next refusal.
--   SELECT * FROM agentsaga_breaker_gate('tool:crm', 5000, 0, 30000, 10, 0.2, 20);
-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_gate(p_dependency text, p_cooldown_ms float8, p_release_interval_ms float8,
                                       p_window_ms float8, p_start float8, p_floor float8, p_ceiling float8,
                                       OUT state text, OUT retry_at timestamptz, OUT open_since timestamptz,
                                       OUT failures integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_state    text;
    v_started  timestamptz;
    v_rate     float8;
    v_interval float8 := p_release_interval_ms;
BEGIN
    PERFORM agentsaga_release_check(p_start, p_floor, p_ceiling);
    IF v_interval IS NULL OR v_interval < 0 THEN
        RAISE EXCEPTION 'agentsaga_breaker_gate: the release interval % ms must not be negative', p_release_interval_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    failures := 0;
    SELECT b.state, b.failures, b.window_started_at, b.release_rate INTO v_state, failures, v_started, v_rate
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
    IF v_interval = 0 THEN
        v_interval := 1000 / agentsaga_release_rate(v_rate, p_start, p_floor, p_ceiling);
    END IF;
    SELECT g.state, g.retry_at, g.open_since INTO state, retry_at, open_since
    FROM agentsaga_breaker_gate(p_dependency, p_cooldown_ms, v_interval) g;
END
$$;
-- +goose StatementEnd

-- Books a released call's place in the dependency's paced line, as 00017's
-- does, and returns when it may leave. With p_release_interval_ms 0 the
-- line runs at the learned rate, raised first by p_successes (the released
-- calls the caller saw succeed since its last booking) when the line is in
-- use. A dependency with no breaker row has no line: now.
--   SELECT agentsaga_breaker_pace('tool:crm', 0, 3, 10, 0.2, 20, 0.05);
-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_pace(p_dependency text, p_release_interval_ms float8, p_successes integer,
                                       p_start float8, p_floor float8, p_ceiling float8, p_step float8)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_rate float8;
    v_gap  float8 := p_release_interval_ms;
    v_slot timestamptz;
    r      circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_release_check(p_start, p_floor, p_ceiling);
    IF v_gap IS NULL OR v_gap < 0 OR p_successes IS NULL OR p_successes < 0 OR p_step IS NULL OR p_step < 0 THEN
        RAISE EXCEPTION 'agentsaga_breaker_pace: the release interval % ms, the successes % and the step % must not be negative',
            p_release_interval_ms, p_successes, p_step
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    IF NOT FOUND THEN
        RETURN v_now;
    END IF;
    v_slot := greatest(r.paced_until, v_now);
    v_rate := r.release_rate;
    IF v_gap = 0 THEN
        v_rate := agentsaga_release_rate(r.release_rate, p_start, p_floor, p_ceiling);
        IF p_successes > 0 AND r.paced_until > v_now THEN
            v_rate := least(p_ceiling,
                            greatest(v_rate + p_step * p_successes,
                                     v_rate + greatest(coalesce(r.release_peak, 0) - v_rate, 0) * (1 - 0.9 ^ p_successes)));
        END IF;
        v_gap := 1000 / v_rate;
    END IF;
    UPDATE circuit_breakers b
    SET paced_until = v_slot + v_gap * interval '1 millisecond', release_rate = v_rate
    WHERE b.dependency = p_dependency;
    RETURN v_slot;
END
$$;
-- +goose StatementEnd

-- 00014's report, which also cuts the release rate: a retryable failure
-- while the breaker is closed and its paced line in use (a released call
-- was booked to leave within the last p_hold_ms) halves it, unless an
-- earlier cut's hold is still on. The cut sets the hold to p_hold_ms past
-- the last booking at the old rate, so the failures of calls that were
-- already in line, or in the same second, count once.
--   SELECT * FROM agentsaga_breaker_report('tool:crm', false, false, 3, 30000, 10, 0.2, 20, 1000);
-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_report(p_dependency text, p_success boolean, p_probe boolean,
                                         p_threshold int, p_window_ms float8,
                                         p_start float8, p_floor float8, p_ceiling float8, p_hold_ms float8,
                                         OUT state text, OUT failures integer, OUT open_since timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_hold interval := p_hold_ms * interval '1 millisecond';
    v_rate float8;
    r      circuit_breakers%ROWTYPE;
BEGIN
    PERFORM agentsaga_release_check(p_start, p_floor, p_ceiling);
    IF p_hold_ms IS NULL OR p_hold_ms < 0 THEN
        RAISE EXCEPTION 'agentsaga_breaker_report: the hold % ms must not be negative', p_hold_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT p_success THEN
        -- Locked before 00014's report reads it, so that the state it
        -- changes and the cut are one change of the row.
        SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    END IF;
    SELECT x.state, x.failures, x.open_since INTO state, failures, open_since
    FROM agentsaga_breaker_report(p_dependency, p_success, p_probe, p_threshold, p_window_ms) x;
    IF p_success OR r.dependency IS NULL OR r.state <> 'closed' OR r.paced_until IS NULL
       OR r.paced_until <= v_now - v_hold OR v_now < coalesce(r.release_hold_until, '-infinity') THEN
        RETURN;
    END IF;
    v_rate := agentsaga_release_rate(r.release_rate, p_start, p_floor, p_ceiling);
    UPDATE circuit_breakers b
    SET release_peak = 0.9 * v_rate, release_rate = greatest(p_floor, v_rate / 2),
        release_hold_until = greatest(r.paced_until, v_now) + v_hold
    WHERE b.dependency = p_dependency;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_breaker_report(text, boolean, boolean, int, float8, float8, float8, float8, float8);
DROP FUNCTION agentsaga_breaker_pace(text, float8, integer, float8, float8, float8, float8);
DROP FUNCTION agentsaga_breaker_gate(text, float8, float8, float8, float8, float8, float8);
DROP FUNCTION agentsaga_release_check(float8, float8, float8);
DROP FUNCTION agentsaga_release_rate(float8, float8, float8, float8);
ALTER TABLE circuit_breakers DROP COLUMN release_rate, DROP COLUMN release_peak, DROP COLUMN release_hold_until;
