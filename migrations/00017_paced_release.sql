-- +goose Up

-- The calls an open breaker parked come back at their release slots
-- (00012), a release interval apart. But a slot is when a call's timer
-- fires, not when its request leaves: a worker that lags (a busy machine,
-- a burst of workflow tasks) sends the calls of several slots together, and
-- a service that takes ten a second got thirteen in one, failed three, and
-- opened the breaker again (`agentsaga bench drain`). So a call released
-- from the queue, once the breaker is closed, also takes its place in a
-- paced line: paced_until is the time the line's next request may leave,
-- and each released call books the later of it and now, moving it on by
-- one release interval. The call waits for its booking in the worker,
-- which is short: the bookings only spread what the lag bunched.
--   SELECT agentsaga_breaker_pace('tool:crm', 105.3);
ALTER TABLE circuit_breakers ADD COLUMN paced_until timestamptz;

-- +goose StatementBegin
-- Books a released call's place in the dependency's paced line and
-- returns when it may leave (now, or later by whole release intervals).
-- A dependency with no breaker row has no line: now.
CREATE FUNCTION agentsaga_breaker_pace(p_dependency text, p_release_interval_ms float8)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_slot timestamptz;
BEGIN
    IF p_release_interval_ms IS NULL OR p_release_interval_ms <= 0 THEN
        RAISE EXCEPTION 'agentsaga_breaker_pace: the release interval % ms must be positive', p_release_interval_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE circuit_breakers b
    SET paced_until = greatest(b.paced_until, v_now) + p_release_interval_ms * interval '1 millisecond'
    WHERE b.dependency = p_dependency
    RETURNING b.paced_until - p_release_interval_ms * interval '1 millisecond' INTO v_slot;
    RETURN coalesce(v_slot, v_now);
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_breaker_pace(text, float8);
ALTER TABLE circuit_breakers DROP COLUMN paced_until;
