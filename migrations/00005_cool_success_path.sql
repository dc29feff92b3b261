-- +goose Up

-- The success path of every call used to take a row lock on its
-- dependency's breaker (the gate, and the success report), so concurrent
-- calls to one dependency queued on that row. A closed breaker is now read
-- without a lock, and a success that is not a probe's is not reported:
-- neither changes a breaker's state. A breaker that opens between the read
-- and the call lets that one call through, as any call already in flight
-- when it trips.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_breaker_allow(p_dependency text, p_cooldown_ms float8)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_cooldown interval := p_cooldown_ms * interval '1 millisecond';
    v_state    text;
    r          circuit_breakers%ROWTYPE;
BEGIN
    SELECT state INTO v_state FROM circuit_breakers WHERE dependency = p_dependency;
    IF NOT FOUND OR v_state = 'closed' THEN
        RETURN 'closed';
    END IF;
    SELECT * INTO r FROM circuit_breakers WHERE dependency = p_dependency FOR UPDATE;
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
CREATE OR REPLACE FUNCTION agentsaga_record_success(p_charge_key text, p_bucket text, p_bonus float8,
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
    IF p_probe AND coalesce(p_dependency, '') <> '' THEN
        PERFORM agentsaga_breaker_record(p_dependency, true, true, 1, 1);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_breaker_allow(p_dependency text, p_cooldown_ms float8)
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
CREATE OR REPLACE FUNCTION agentsaga_record_success(p_charge_key text, p_bucket text, p_bonus float8,
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
        PERFORM agentsaga_breaker_record(p_dependency, true, p_probe, 1, 1);
    END IF;
END
$$;
-- +goose StatementEnd
