-- +goose Up

-- A new run's tasks weigh more on Temporal's fairness keys while its
-- account has few runs in flight (start.go, taskPriority): the starter
-- counts them, at most a handful, on every Start. Only unfinished runs are
-- indexed, so the count reads the account's runs in flight and never its
-- history. (00034 was a change since reverted; the number stays unused so
-- that no database that applied it skips this one.)
CREATE INDEX runs_in_flight_by_account ON runs (account) WHERE finished_at IS NULL;

-- +goose Down
DROP INDEX runs_in_flight_by_account;
