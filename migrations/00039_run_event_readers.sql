-- +goose Up

-- A run's events wake Postgres listeners only while someone follows the run
-- (issue 46, item 5). On Postgres 15 a committed NOTIFY wakes every backend
-- that LISTENs in the database, whatever its channel, into a transaction of
-- its own (about 30 us of Postgres CPU each). The run events' NOTIFY came
-- with every claim, settle and publish, about 2.6 a tool call, and woke each
-- worker's admission and webhooks listeners, who never read run events:
-- about 0.16 ms of Postgres CPU a call for every worker process in the
-- fleet, for readers that most of the time did not exist.
--
-- A process's runevents.Hub leases a row here for each run its readers
-- follow, before they first read, and renews it while they follow. An event
-- of a run without a live lease is stored and numbered as before, and
-- notifies nobody. UNLOGGED: the leases are renewed within seconds, so a
-- crash that empties the table costs a reader a poll at most.
CREATE UNLOGGED TABLE run_event_readers (
    workflow_id text PRIMARY KEY,
    until       timestamptz NOT NULL
);

-- +goose StatementBegin
-- Wakes workflow ID's readers, if a process holds a lease on it.
CREATE FUNCTION agentsaga_wake_run_readers(p_workflow_id text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM run_event_readers WHERE workflow_id = p_workflow_id AND until > clock_timestamp()) THEN
        PERFORM pg_notify('agentsaga_run_events', p_workflow_id);
    END IF;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_number_events(p_workflow_id text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_last  bigint;
    v_added bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM run_event_inbox WHERE workflow_id = p_workflow_id) THEN
        RETURN 0;
    END IF;
    INSERT INTO run_event_heads AS h (workflow_id, last_seq) VALUES (p_workflow_id, 0)
    ON CONFLICT (workflow_id) DO UPDATE SET last_seq = h.last_seq
    RETURNING h.last_seq INTO v_last;
    WITH taken AS (
        DELETE FROM run_event_inbox WHERE workflow_id = p_workflow_id
        RETURNING id, event_key, kind, call_key, data, at
    ), batch AS (
        SELECT DISTINCT ON (t.event_key) t.*
        FROM taken t
        WHERE NOT EXISTS (SELECT 1 FROM run_events r WHERE r.workflow_id = p_workflow_id AND r.event_key = t.event_key)
        ORDER BY t.event_key, t.id
    )
    INSERT INTO run_events (workflow_id, seq, event_key, kind, call_key, data, at)
    SELECT p_workflow_id, v_last + row_number() OVER (ORDER BY id), event_key, kind, call_key, data, at
    FROM batch;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    IF v_added > 0 THEN
        UPDATE run_event_heads SET last_seq = v_last + v_added WHERE workflow_id = p_workflow_id;
        PERFORM agentsaga_wake_run_readers(p_workflow_id);
    END IF;
    RETURN v_added;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_append_events(p_workflow_id text, p_keys text[], p_kinds text[],
    p_call_keys text[], p_data jsonb[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_event_inbox (workflow_id, event_key, kind, call_key, data)
    SELECT p_workflow_id, e.key, e.kind, coalesce(e.call_key, ''), e.data
    FROM unnest(p_keys, p_kinds, p_call_keys, p_data) WITH ORDINALITY AS e(key, kind, call_key, data, ord)
    ORDER BY e.ord;
    PERFORM agentsaga_wake_run_readers(p_workflow_id);
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_append_events(p_workflow_id text, p_keys text[], p_kinds text[],
    p_call_keys text[], p_data jsonb[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_event_inbox (workflow_id, event_key, kind, call_key, data)
    SELECT p_workflow_id, e.key, e.kind, coalesce(e.call_key, ''), e.data
    FROM unnest(p_keys, p_kinds, p_call_keys, p_data) WITH ORDINALITY AS e(key, kind, call_key, data, ord)
    ORDER BY e.ord;
    PERFORM pg_notify('agentsaga_run_events', p_workflow_id);
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_number_events(p_workflow_id text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_last  bigint;
    v_added bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM run_event_inbox WHERE workflow_id = p_workflow_id) THEN
        RETURN 0;
    END IF;
    INSERT INTO run_event_heads AS h (workflow_id, last_seq) VALUES (p_workflow_id, 0)
    ON CONFLICT (workflow_id) DO UPDATE SET last_seq = h.last_seq
    RETURNING h.last_seq INTO v_last;
    WITH taken AS (
        DELETE FROM run_event_inbox WHERE workflow_id = p_workflow_id
        RETURNING id, event_key, kind, call_key, data, at
    ), batch AS (
        SELECT DISTINCT ON (t.event_key) t.*
        FROM taken t
        WHERE NOT EXISTS (SELECT 1 FROM run_events r WHERE r.workflow_id = p_workflow_id AND r.event_key = t.event_key)
        ORDER BY t.event_key, t.id
    )
    INSERT INTO run_events (workflow_id, seq, event_key, kind, call_key, data, at)
    SELECT p_workflow_id, v_last + row_number() OVER (ORDER BY id), event_key, kind, call_key, data, at
    FROM batch;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    IF v_added > 0 THEN
        UPDATE run_event_heads SET last_seq = v_last + v_added WHERE workflow_id = p_workflow_id;
        PERFORM pg_notify('agentsaga_run_events', p_workflow_id);
    END IF;
    RETURN v_added;
END $$;
-- +goose StatementEnd

DROP FUNCTION agentsaga_wake_run_readers(text);
DROP TABLE run_event_readers;
