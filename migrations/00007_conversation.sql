-- +goose Up

-- The conversation lives in the ledger, not in workflow history: one row
-- per message, keyed by the run (its workflow ID, which continue-as-new
-- keeps) and a sequence number the workflow assigns. Each row is written by
-- the activity that produced it (a tool's result in the statement that
-- completes its action, the model's reply in its own), and written once:
-- a later attempt's insert of the same (workflow_id, seq) does nothing.
CREATE TABLE messages (
    workflow_id  text NOT NULL,
    seq          integer NOT NULL CHECK (seq >= 0),
    role         text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content      text NOT NULL,
    tool_calls   jsonb,
    tool_call_id text NOT NULL DEFAULT '',
    name         text NOT NULL DEFAULT '',
    -- Pinned messages are sent whole in every request: the system prompt,
    -- the goal, a human's instructions.
    pinned       boolean NOT NULL DEFAULT false,
    -- The idempotency key of the call whose output this is, so a shortened
    -- output names where the whole one is (read_result).
    source_key   text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (workflow_id, seq)
);

-- A model turn is claimed and stored under its idempotency key like a tool
-- call, so a reply already paid for is never asked for again; kind keeps
-- the turns apart from the actions on the outside world.
ALTER TABLE actions ADD COLUMN kind text NOT NULL DEFAULT 'tool' CHECK (kind IN ('tool', 'model'));

-- +goose Down
ALTER TABLE actions DROP COLUMN kind;
DROP TABLE messages;
