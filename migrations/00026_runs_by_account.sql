-- +goose Up

-- The HTTP API (issue 33) lists runs by account and shows a key only its
-- account's runs. The account a run is charged to is in its spec
-- (budget.account); a stored generated column keeps it beside the row, so
-- that the listing is an index scan, not a pass over every spec. started_by
-- names who started the run through the API (the key's name), for the
-- record; '' for runs started any other way.
ALTER TABLE runs
    ADD COLUMN account text GENERATED ALWAYS AS (coalesce(spec -> 'budget' ->> 'account', '')) STORED,
    ADD COLUMN started_by text NOT NULL DEFAULT '';
CREATE INDEX runs_by_account ON runs (account, started_at DESC);
CREATE INDEX runs_by_start ON runs (started_at DESC);

-- +goose Down
DROP INDEX runs_by_start;
DROP INDEX runs_by_account;
ALTER TABLE runs DROP COLUMN started_by, DROP COLUMN account;
