-- +goose Up

-- What a run spent, written when it ends. While it runs, the same figures
-- come live from leaf_calls and run_retry_counters.
ALTER TABLE runs
    ADD COLUMN calls     integer NOT NULL DEFAULT 0,
    ADD COLUMN retries   integer NOT NULL DEFAULT 0,
    ADD COLUMN usd_spent double precision NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE runs DROP COLUMN calls, DROP COLUMN retries, DROP COLUMN usd_spent;
