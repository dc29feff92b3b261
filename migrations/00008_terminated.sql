-- +goose Up

-- A run that ended behind the engine's back (terminated in Temporal, timed
-- out, or whose workflow vanished) is found by the reconciler and marked
-- 'terminated' with Temporal's reason, until the walk of its compensation
-- stack ends it compensated or needs-attention.
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('running', 'completed', 'partial', 'escalated', 'compensated', 'needs-attention', 'failed',
                      'terminated'));

-- The reconciler pages through the runs that have not ended, by workflow ID.
CREATE INDEX runs_unfinished ON runs (workflow_id) WHERE finished_at IS NULL;

-- +goose Down
DROP INDEX runs_unfinished;
UPDATE runs SET status = 'needs-attention' WHERE status = 'terminated';
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('running', 'completed', 'partial', 'escalated', 'compensated', 'needs-attention', 'failed'));
