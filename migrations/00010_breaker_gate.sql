-- +goose Up

-- The gate of a call, as agentsaga_breaker_allow, that also says when an
-- open breaker lets its next probe out: a call refused at the gate waits
-- for that moment on a workflow timer (it is parked) instead of failing.
-- retry_at is NULL unless the answer is 'open'. While a half-open breaker's
-- probe is in flight, the probe's outcome is due within the probe's own
-- call, so a parked call looks again within a second (or at the cooldown,
-- when that is shorter), rather than a whole cooldown later.
--   SELECT * FROM agentsaga_breaker_gate('tool:crm', 5000);
-- agentsaga_breaker_allow stays for the workers of older builds.

-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_gate(p_dependency text, p_cooldown_ms float8,
                                       OUT state text, OUT retry_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_cooldown interval := p_cooldown_ms * interval '1 millisecond';
    v_state    text;
    r          circuit_breakers%ROWTYPE;
BEGIN
    -- A closed breaker is read without a lock (see 00005).
    SELECT b.state INTO v_state FROM circuit_breakers b WHERE b.dependency = p_dependency;
    IF NOT FOUND OR v_state = 'closed' THEN
        state := 'closed';
        RETURN;
    END IF;
    SELECT * INTO r FROM circuit_breakers b WHERE b.dependency = p_dependency FOR UPDATE;
    IF r.state = 'closed' THEN
        state := 'closed';
        RETURN;
    END IF;
    IF r.state = 'open' AND (r.opened_at IS NULL OR v_now - r.opened_at >= v_cooldown) THEN
        UPDATE circuit_breakers SET state = 'half-open', probe_in_flight = true, updated_at = v_now
        WHERE dependency = p_dependency;
        state := 'probe';
        RETURN;
    END IF;
    IF r.state = 'half-open' AND (NOT r.probe_in_flight OR v_now - r.updated_at >= v_cooldown) THEN
        UPDATE circuit_breakers SET probe_in_flight = true, updated_at = v_now
        WHERE dependency = p_dependency;
        state := 'probe';
        RETURN;
    END IF;
    state := 'open';
    IF r.state = 'open' THEN
        retry_at := r.opened_at + v_cooldown;
    ELSE
        retry_at := least(r.updated_at + v_cooldown, v_now + least(v_cooldown, interval '1 second'));
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_breaker_gate(text, float8);
