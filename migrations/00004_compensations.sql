-- +goose Up

-- The saga's stack: one row per forward action that has a compensating
-- action, written in the same statement that claims the forward action,
-- so a compensation exists before the forward action is attempted, even
-- one whose outcome is never learned (a timeout, a lost worker).
CREATE TABLE compensations (
    id                  bigserial PRIMARY KEY,
    forward_key         text NOT NULL UNIQUE,
    workflow_id         text NOT NULL,
    forward_activity_id text NOT NULL,
    tool                text NOT NULL,
    -- The compensating tool's arguments, with {{args.x}}, {{result.x}} and
    -- {{key}} placeholders filled in from the forward call when it runs.
    arguments_template  text NOT NULL,
    status              text NOT NULL DEFAULT 'registered'
        CHECK (status IN ('registered', 'compensated', 'not-needed', 'failed', 'skipped')),
    error               text NOT NULL DEFAULT '',
    -- Who took responsibility for a skipped compensation, and why.
    reason              text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX compensations_by_workflow ON compensations (workflow_id, id);

-- A run's status can change while it runs (escalated, needs-attention).
ALTER TABLE runs ADD COLUMN status_detail text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE runs DROP COLUMN status_detail;
DROP TABLE compensations;
