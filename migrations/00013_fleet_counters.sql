-- +goose Up

-- The fleet figures the metrics endpoint reports, kept as rows change, so
-- that a scrape reads a few rows however large the ledger grows (before,
-- every scrape counted leaf_calls and runs whole).
--   leaf_calls, logical_calls: every leaf call, and every first attempt
--     (a logical call); counters, which pruning old rows does not lower.
--   usd_spent, tokens_spent: summed when a run finishes; counters too.
--   runs:<status>: how many runs are in each status now; a gauge, which
--     pruning lowers.
-- The triggers only append deltas to fleet_counter_deltas, a table without
-- an index or a row anyone updates: the write path takes no lock for them,
-- so two transactions that write leaf calls can never wait on each other
-- for a counter (a first version updated shared counter rows, and batched
-- claims deadlocked on them). agentsaga_fleet_counters(), which a scrape
-- calls, folds the deltas into fleet_counters and returns the figures.
CREATE TABLE fleet_counters (
    name  text PRIMARY KEY,
    value double precision NOT NULL DEFAULT 0
);
CREATE TABLE fleet_counter_deltas (
    name  text NOT NULL,
    value double precision NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION agentsaga_count_leaf_calls()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO fleet_counter_deltas (name, value)
    SELECT 'leaf_calls', count(*) FROM inserted HAVING count(*) > 0
    UNION ALL
    SELECT 'logical_calls', count(*) FROM inserted WHERE attempt = 1 HAVING count(*) > 0;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER leaf_calls_counted AFTER INSERT ON leaf_calls
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION agentsaga_count_leaf_calls();

-- +goose StatementBegin
CREATE FUNCTION agentsaga_count_runs()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        INSERT INTO fleet_counter_deltas VALUES ('runs:' || OLD.status, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO fleet_counter_deltas VALUES ('runs:' || NEW.status, 1);
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL THEN
        INSERT INTO fleet_counter_deltas VALUES ('usd_spent', NEW.usd_spent), ('tokens_spent', NEW.tokens_used);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER runs_counted AFTER INSERT OR DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION agentsaga_count_runs();
CREATE TRIGGER runs_counted_on_change AFTER UPDATE OF status, finished_at ON runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL))
    EXECUTE FUNCTION agentsaga_count_runs();

-- +goose StatementBegin
-- Folds the deltas appended since the last call into fleet_counters and
-- returns every figure. Concurrent callers fold disjoint deltas (a delta
-- is deleted once) and queue only on the few fleet_counters rows.
--   SELECT * FROM agentsaga_fleet_counters();
CREATE FUNCTION agentsaga_fleet_counters(OUT name text, OUT value double precision)
RETURNS SETOF record
LANGUAGE plpgsql
AS $$
BEGIN
    WITH folded AS (DELETE FROM fleet_counter_deltas RETURNING fleet_counter_deltas.name, fleet_counter_deltas.value)
    INSERT INTO fleet_counters AS c (name, value)
    SELECT f.name, sum(f.value) FROM folded f GROUP BY f.name
    ON CONFLICT ON CONSTRAINT fleet_counters_pkey DO UPDATE SET value = c.value + EXCLUDED.value;
    RETURN QUERY SELECT c.name, c.value FROM fleet_counters c ORDER BY c.name;
END
$$;
-- +goose StatementEnd

-- The figures of the rows already there, counted once.
INSERT INTO fleet_counters (name, value)
SELECT 'leaf_calls', count(*) FROM leaf_calls
UNION ALL SELECT 'logical_calls', count(*) FROM (SELECT DISTINCT workflow_id, activity_id FROM leaf_calls) AS logical
UNION ALL SELECT 'usd_spent', coalesce(sum(usd_spent), 0) FROM runs WHERE finished_at IS NOT NULL
UNION ALL SELECT 'tokens_spent', coalesce(sum(tokens_used), 0) FROM runs WHERE finished_at IS NOT NULL
UNION ALL SELECT 'runs:' || status, count(*) FROM runs GROUP BY status;

-- +goose Down
DROP FUNCTION agentsaga_fleet_counters();
DROP TRIGGER runs_counted_on_change ON runs;
DROP TRIGGER runs_counted ON runs;
DROP TRIGGER leaf_calls_counted ON leaf_calls;
DROP FUNCTION agentsaga_count_runs();
DROP FUNCTION agentsaga_count_leaf_calls();
DROP TABLE fleet_counter_deltas;
DROP TABLE fleet_counters;
