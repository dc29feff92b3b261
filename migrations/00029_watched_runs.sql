-- +goose Up

-- Readers say which runs they follow, so that only those runs' events
-- notify (issue 33's follow-up). A NOTIFY is not free: Postgres serializes
-- the commits of notifying transactions on one lock, and every claim and
-- settle appends its call's events (00027), so notifying for every run cut
-- the ledger's writes a second by a third (BENCHMARKS.md, ledger writes).
-- A follower (runevents.Follow) upserts its run here with a lease, and
-- renews it while it follows; a run nobody follows is appended to and
-- numbered as before, without a notification. A reader that began while
-- an event's statement ran may miss that one wake-up: Follow polls for it.
CREATE TABLE run_event_watchers (
    workflow_id text PRIMARY KEY,
    until       timestamptz NOT NULL
);

-- +goose StatementBegin
-- Whether a reader follows workflow ID now.
CREATE FUNCTION agentsaga_watched(p_workflow_id text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM run_event_watchers WHERE workflow_id = p_workflow_id AND until > now())
$$;
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
    IF agentsaga_watched(p_workflow_id) THEN
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
        IF agentsaga_watched(p_workflow_id) THEN
            PERFORM pg_notify('agentsaga_run_events', p_workflow_id);
        END IF;
    END IF;
    RETURN v_added;
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
DROP FUNCTION agentsaga_watched(text);
DROP TABLE run_event_watchers;
