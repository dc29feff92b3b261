-- +goose Up

-- A message's size, estimated once by the activity that writes it, so a
-- model call can fit the conversation to its context budget from the sizes
-- alone and read only the start of the outputs it shortens: the cost of a
-- turn stays flat however long the run (0 means not estimated).
ALTER TABLE messages ADD COLUMN tokens integer NOT NULL DEFAULT 0 CHECK (tokens >= 0);

-- +goose Down
ALTER TABLE messages DROP COLUMN tokens;
