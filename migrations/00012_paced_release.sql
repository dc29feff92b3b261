-- +goose Up

-- The calls an open breaker parks come back one at a time. Each refusal at
-- the gate hands the call its own release slot: the breaker's next probe, or
-- the slot after the last one handed out, whichever is later. Slots are
-- p_release_interval_ms apart, so the calls parked behind one breaker form a
-- queue, in the order they were refused, that comes back at one call per
-- interval whatever its length:
-- - while the breaker stays open, the parked calls look at it at that rate
--   (a call that finds it still open takes the queue's last slot again), so
--   a long outage costs the gate one statement per interval, not one per
--   parked call per cooldown;
-- - once it has closed, the backlog reaches the dependency at that rate,
--   beside the calls that keep arriving, instead of in one wave that fails
--   again on a service just back (the jitter of 00010's callers spread the
--   backlog over half a cooldown only).
-- release_next is the first slot not yet handed out; a slot in the past is
-- never handed out, so a queue drained long ago does not delay the next
-- outage's calls.
--
-- A refusal also says since when the breaker has been open in this outage
-- (open_since): a call behind a long queue may wait past
-- escalate.after_breaker_open_seconds for its slot, and it is the outage,
-- not the queue, that should outlast that threshold before a human is
-- asked. opened_at cannot say it: every failed probe moves it. open_since is
-- written at the first refusal of an outage; one older than the breaker's
-- window_started_at belongs to an earlier outage, because closing the
-- breaker, and every failure after that, moves window_started_at past it.
--   SELECT * FROM agentsaga_breaker_gate('tool:crm', 5000, 500);
-- The two-argument agentsaga_breaker_gate of 00010 stays, unchanged, for the
-- workers of older builds (their refused calls keep their own jitter).
ALTER TABLE circuit_breakers ADD COLUMN release_next timestamptz, ADD COLUMN open_since timestamptz;

-- +goose StatementBegin
CREATE FUNCTION agentsaga_breaker_gate(p_dependency text, p_cooldown_ms float8, p_release_interval_ms float8,
                                       OUT state text, OUT retry_at timestamptz, OUT open_since timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now      timestamptz := clock_timestamp();
    v_cooldown interval := p_cooldown_ms * interval '1 millisecond';
    v_interval interval := p_release_interval_ms * interval '1 millisecond';
    v_state    text;
    v_probe    timestamptz;
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
    -- The next probe, as in 00010: the end of the cooldown, or, while a
    -- probe is in flight, soon after its outcome is due.
    IF r.state = 'open' THEN
        v_probe := r.opened_at + v_cooldown;
    ELSE
        v_probe := least(r.updated_at + v_cooldown, v_now + least(v_cooldown, interval '1 second'));
    END IF;
    retry_at := greatest(v_probe, coalesce(r.release_next, v_probe));
    open_since := r.open_since;
    IF open_since IS NULL OR open_since < r.window_started_at THEN
        open_since := coalesce(r.opened_at, v_now);
    END IF;
    UPDATE circuit_breakers b SET release_next = retry_at + v_interval, open_since = agentsaga_breaker_gate.open_since
    WHERE b.dependency = p_dependency;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_breaker_gate(text, float8, float8);
ALTER TABLE circuit_breakers DROP COLUMN release_next, DROP COLUMN open_since;
