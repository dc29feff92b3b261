-- +goose Up

-- Fences: a key may be executed only under a live claim, held by a live
-- attempt, of a live run.

-- A fenced action can no longer be claimed by any attempt: the workflow gave
-- up on the call, or the run's rollback reached it. An attempt that already
-- holds it may still settle it (its effect may have happened, and the
-- ledger must learn the truth); none may take it over.
ALTER TABLE actions
    ADD COLUMN fenced_at    timestamptz,
    ADD COLUMN fence_reason text NOT NULL DEFAULT '',
    -- The forward key a compensating action undoes; NULL for a forward
    -- action. A rollback fences forward actions only.
    ADD COLUMN compensates  text,
    -- The error type the attempt failed with (Rejected, Refusal, ...), so a
    -- stored failure replays as what it was.
    ADD COLUMN error_type   text NOT NULL DEFAULT '';

-- closing_at: a rollback began, so no forward action of the run may be
-- claimed any more (its compensations still may, until the run ends).
-- finished_at (already there) fences every claim of the run.
ALTER TABLE runs ADD COLUMN closing_at timestamptz;

-- A leaf call whose attempt was lost (its worker died) ends 'lost' when a
-- later attempt takes the key over, or when its run settles or ends.
ALTER TABLE leaf_calls DROP CONSTRAINT leaf_calls_outcome_check;
ALTER TABLE leaf_calls ADD CONSTRAINT leaf_calls_outcome_check
    CHECK (outcome IN ('in-flight', 'ok', 'error', 'lost'));
CREATE INDEX leaf_calls_in_flight ON leaf_calls (idempotency_key) WHERE outcome = 'in-flight';

-- A run's sub-agents, for walking the whole tree's stack.
CREATE INDEX runs_by_parent ON runs (parent_workflow_id) WHERE parent_workflow_id IS NOT NULL;

-- +goose Down
DROP INDEX runs_by_parent;
DROP INDEX leaf_calls_in_flight;
UPDATE leaf_calls SET outcome = 'error' WHERE outcome = 'lost';
ALTER TABLE leaf_calls DROP CONSTRAINT leaf_calls_outcome_check;
ALTER TABLE leaf_calls ADD CONSTRAINT leaf_calls_outcome_check
    CHECK (outcome IN ('in-flight', 'ok', 'error'));
ALTER TABLE runs DROP COLUMN closing_at;
ALTER TABLE actions DROP COLUMN fenced_at, DROP COLUMN fence_reason, DROP COLUMN compensates, DROP COLUMN error_type;
