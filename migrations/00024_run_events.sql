-- +goose Up

-- A run's event log (issue 33): what a run did as it happened, for the
-- clients that watch it live. Each event has a key of its own within its
-- run, so a publish that is retried (an activity's next attempt, a worker
-- that published and died before it could say so) stores it once. Events
-- are numbered per run, 1, 2, 3..., in the order their publishes commit:
-- a client that read through N asks for what follows N and misses nothing.
CREATE TABLE run_events (
    workflow_id text NOT NULL,
    seq         bigint NOT NULL,
    event_key   text NOT NULL,
    kind        text NOT NULL,
    call_key    text NOT NULL DEFAULT '',
    data        jsonb,
    at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, seq),
    UNIQUE (workflow_id, event_key)
);

-- The last number each run's log handed out. Its row is locked by each
-- publish until it commits, so the publishes of one run take their turns
-- and their numbers follow their commits.
CREATE TABLE run_event_heads (
    workflow_id text PRIMARY KEY,
    last_seq    bigint NOT NULL
);

-- +goose StatementBegin
-- Publishes a batch of one run's events in one statement: those whose key
-- the run's log already holds are skipped, the others are numbered after
-- the last, in the batch's order, and readers waiting on the channel
-- agentsaga_run_events are told which run has news. Returns how many were
-- new.
CREATE FUNCTION agentsaga_publish_events(p_workflow_id text, p_keys text[], p_kinds text[],
    p_call_keys text[], p_data jsonb[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_last  bigint;
    v_added bigint;
BEGIN
    INSERT INTO run_event_heads AS h (workflow_id, last_seq) VALUES (p_workflow_id, 0)
    ON CONFLICT (workflow_id) DO UPDATE SET last_seq = h.last_seq
    RETURNING h.last_seq INTO v_last;
    WITH batch AS (
        SELECT DISTINCT ON (e.key) e.key, e.kind, e.call_key, e.data, e.ord
        FROM unnest(p_keys, p_kinds, p_call_keys, p_data) WITH ORDINALITY AS e(key, kind, call_key, data, ord)
        WHERE NOT EXISTS (SELECT 1 FROM run_events r WHERE r.workflow_id = p_workflow_id AND r.event_key = e.key)
        ORDER BY e.key, e.ord
    )
    INSERT INTO run_events (workflow_id, seq, event_key, kind, call_key, data)
    SELECT p_workflow_id, v_last + row_number() OVER (ORDER BY ord), key, kind, coalesce(call_key, ''), data
    FROM batch;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    IF v_added > 0 THEN
        UPDATE run_event_heads SET last_seq = v_last + v_added WHERE workflow_id = p_workflow_id;
        PERFORM pg_notify('agentsaga_run_events', p_workflow_id);
    END IF;
    RETURN v_added;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_publish_events(text, text[], text[], text[], jsonb[]);
DROP TABLE run_event_heads;
DROP TABLE run_events;
