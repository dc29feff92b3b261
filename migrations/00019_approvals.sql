-- +goose Up

-- Approval before the act (issue 24). A call whose tool needs a human's yes
-- is recorded here, under its idempotency key and with its arguments,
-- before anything is sent; the decision is written into the same row, with
-- who decided, when and why. A decided row never changes again: the first
-- decision stands, and a second operator is told whose it was.
CREATE TABLE approvals (
    idempotency_key text PRIMARY KEY,
    workflow_id     text NOT NULL,
    call_id         text NOT NULL,
    tool            text NOT NULL,
    arguments       text NOT NULL,
    why             text NOT NULL DEFAULT '',
    status          text NOT NULL DEFAULT 'awaiting-approval'
        CHECK (status IN ('awaiting-approval', 'approved', 'denied', 'timed-out')),
    decided_by      text NOT NULL DEFAULT '',
    reason          text NOT NULL DEFAULT '',
    requested_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    decided_at      timestamptz
);
-- What waits across the fleet, oldest first (agentsaga approvals).
CREATE INDEX approvals_awaiting ON approvals (requested_at) WHERE status = 'awaiting-approval';
CREATE INDEX approvals_by_workflow ON approvals (workflow_id, requested_at);

-- A run's limits on a tool's arguments (limits[].run_sum), counted over the
-- run's whole tree (workflow_id is the root run's: its sub-agents count too). Each call that
-- passed a limit holds its amount here, under its key; the run's total is
-- the sum of the holds whose call completed or may have (a failed attempt
-- may have done its work before it timed out), less those compensated or
-- found not needing it, and less calls that did nothing: rejected, or
-- fenced before any attempt claimed them.
CREATE TABLE limit_holds (
    idempotency_key text NOT NULL,
    workflow_id     text NOT NULL,
    limit_name      text NOT NULL,
    amount          double precision NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (idempotency_key, limit_name)
);
CREATE INDEX limit_holds_by_run ON limit_holds (workflow_id, limit_name);

-- agentsaga_hold_limit counts a call against a run's limit, or refuses it,
-- in one statement. A transaction-scoped advisory lock on (run, limit)
-- makes the sum and the insert one step, so two calls of one run checked
-- side by side (two sub-agents, two workers) never both fit into the last
-- room. A call already holding is granted again (an activity delivered
-- twice), with the total without it.
-- +goose StatementBegin
CREATE FUNCTION agentsaga_hold_limit(p_key text, p_workflow_id text, p_limit text, p_amount double precision, p_at_most double precision)
RETURNS TABLE (granted boolean, total double precision)
LANGUAGE plpgsql AS $$
DECLARE
    v_total double precision;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_workflow_id || chr(31) || p_limit, 0));
    SELECT coalesce(sum(h.amount), 0) INTO v_total
    FROM limit_holds h
    LEFT JOIN actions a ON a.idempotency_key = h.idempotency_key
    LEFT JOIN compensations c ON c.forward_key = h.idempotency_key
    WHERE h.workflow_id = p_workflow_id AND h.limit_name = p_limit AND h.idempotency_key <> p_key
      AND coalesce(a.status, '') <> 'rejected'
      AND NOT (coalesce(a.status, '') = 'failed' AND a.attempts = 0)
      AND coalesce(c.status, '') NOT IN ('compensated', 'not-needed');
    IF EXISTS (SELECT 1 FROM limit_holds h WHERE h.idempotency_key = p_key AND h.limit_name = p_limit) THEN
        RETURN QUERY SELECT true, v_total;
        RETURN;
    END IF;
    IF v_total + p_amount > p_at_most THEN
        RETURN QUERY SELECT false, v_total;
        RETURN;
    END IF;
    INSERT INTO limit_holds (idempotency_key, workflow_id, limit_name, amount) VALUES (p_key, p_workflow_id, p_limit, p_amount);
    RETURN QUERY SELECT true, v_total;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_hold_limit(text, text, text, double precision, double precision);
DROP TABLE limit_holds;
DROP TABLE approvals;
