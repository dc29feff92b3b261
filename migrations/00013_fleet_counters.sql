-- +goose Up

-- The fleet figures the metrics endpoint reports, kept as rows change, so
-- that a scrape reads a few dozen rows however large the ledger grows
-- (before, every scrape counted leaf_calls and runs whole).
--   leaf_calls, logical_calls: every leaf call, and every first attempt
--     (a logical call); counters, which pruning old rows does not lower.
--     Sharded by the leaf call's id, so that concurrent inserts spread
--     over 16 rows instead of queuing on one.
--   usd_spent, tokens_spent: summed when a run finishes; counters too.
--   runs:<status>: how many runs are in each status now; a gauge, which
--     pruning lowers.
-- A figure is the sum of its shards.
CREATE TABLE fleet_counters (
    name  text NOT NULL,
    shard integer NOT NULL DEFAULT 0,
    value double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (name, shard)
);

-- +goose StatementBegin
CREATE FUNCTION agentsaga_count(p_name text, p_shard integer, p_delta double precision)
RETURNS void
LANGUAGE sql
AS $$
    INSERT INTO fleet_counters (name, shard, value) VALUES (p_name, p_shard, p_delta)
    ON CONFLICT (name, shard) DO UPDATE SET value = fleet_counters.value + EXCLUDED.value;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION agentsaga_count_leaf_calls()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_calls   bigint;
    v_logical bigint;
    v_shard   integer;
BEGIN
    SELECT count(*), count(*) FILTER (WHERE attempt = 1), (min(id) % 16)::integer
    INTO v_calls, v_logical, v_shard FROM inserted;
    IF v_calls > 0 THEN
        PERFORM agentsaga_count('leaf_calls', v_shard, v_calls);
        IF v_logical > 0 THEN
            PERFORM agentsaga_count('logical_calls', v_shard, v_logical);
        END IF;
    END IF;
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
        PERFORM agentsaga_count('runs:' || OLD.status, 0, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM agentsaga_count('runs:' || NEW.status, 0, 1);
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL THEN
        PERFORM agentsaga_count('usd_spent', 0, NEW.usd_spent);
        PERFORM agentsaga_count('tokens_spent', 0, NEW.tokens_used);
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

-- The figures of the rows already there, counted once.
INSERT INTO fleet_counters (name, shard, value)
SELECT 'leaf_calls', 0, count(*) FROM leaf_calls
UNION ALL SELECT 'logical_calls', 0, count(*) FROM (SELECT DISTINCT workflow_id, activity_id FROM leaf_calls) AS logical
UNION ALL SELECT 'usd_spent', 0, coalesce(sum(usd_spent), 0) FROM runs WHERE finished_at IS NOT NULL
UNION ALL SELECT 'tokens_spent', 0, coalesce(sum(tokens_used), 0) FROM runs WHERE finished_at IS NOT NULL
UNION ALL SELECT 'runs:' || status, 0, count(*) FROM runs GROUP BY status;

-- +goose Down
DROP TRIGGER runs_counted_on_change ON runs;
DROP TRIGGER runs_counted ON runs;
DROP TRIGGER leaf_calls_counted ON leaf_calls;
DROP FUNCTION agentsaga_count_runs();
DROP FUNCTION agentsaga_count_leaf_calls();
DROP FUNCTION agentsaga_count(text, integer, double precision);
DROP TABLE fleet_counters;
