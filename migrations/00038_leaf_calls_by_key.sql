-- +goose NO TRANSACTION
-- +goose Up

-- A leaf call's settle (UPDATE ... SET outcome, error, finished_at WHERE
-- id) was never a HOT update: Postgres counts a column that a partial
-- index's predicate reads as indexed, and leaf_calls_in_flight (00006)
-- is on idempotency_key WHERE outcome = 'in-flight'. So every settle wrote
-- a new tuple into leaf_calls_pkey and leaf_calls_by_workflow as well (in
-- `agentsaga bench ledger`, 0 of 27,695 leaf-call updates were HOT, and
-- 94% of the actions' were). The index is on the key alone now: the
-- statements that look for a key's in-flight attempt (a fence, a claim's
-- takeover, a rollback's settle) read the key's few attempts and keep the
-- in-flight one, and no index reads outcome, so a settle can stay on its
-- page. Built CONCURRENTLY (outside a transaction) so that a large ledger
-- keeps taking writes while it builds. A concurrent build that failed
-- half way leaves an invalid index behind, which IF NOT EXISTS would keep:
-- a run of this migration after such a failure drops it and builds again.
DROP INDEX CONCURRENTLY IF EXISTS leaf_calls_by_key;
CREATE INDEX CONCURRENTLY leaf_calls_by_key ON leaf_calls (idempotency_key);
DROP INDEX CONCURRENTLY IF EXISTS leaf_calls_in_flight;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS leaf_calls_in_flight ON leaf_calls (idempotency_key) WHERE outcome = 'in-flight';
DROP INDEX CONCURRENTLY IF EXISTS leaf_calls_by_key;
