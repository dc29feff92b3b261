-- +goose Up

-- A call's own events in its run's log (issue 33): a turn or a tool call
-- started, and each attempt's end. They ride on the statements that claim
-- and settle the call, as triggers on its leaf call (one row per attempt
-- that left the process), so a call still costs the ledger two statements.
-- A model's text streams in between (text_delta events, published by the
-- activity in batches). An attempt that ends other than ok (it failed, or
-- a later attempt took the key over after its worker died) voids the text
-- it streamed: attempt_discarded, under the key <call key>/attempt-<n>/discarded.
-- Compensations publish their own steps.
--
-- Event keys: <call key>/attempt-<n>/started, .../finished, .../discarded.
--
-- Numbering an event takes its run's head row (run_event_heads), and a
-- claim or a settle must not take it: a batch of them (internal/coalesce)
-- would hold one run's head while it waits for another statement's row,
-- and deadlock with the next batch (a first version did, in
-- TestConcurrentCallsKeepTheirAnswers). So the triggers only append to
-- run_event_inbox, which has no unique index and no row anyone updates,
-- and a run's inbox is numbered into its log by the next publish or read
-- of that run (agentsaga_number_events), each a statement of one run.
CREATE TABLE run_event_inbox (
    id          bigserial PRIMARY KEY,
    workflow_id text NOT NULL,
    event_key   text NOT NULL,
    kind        text NOT NULL,
    call_key    text NOT NULL DEFAULT '',
    data        jsonb,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX run_event_inbox_by_run ON run_event_inbox (workflow_id, id);

-- +goose StatementBegin
-- Numbers workflow ID's inbox into its log, in the order the events were
-- appended, skipping keys the log holds already, and wakes its readers.
-- Returns how many were new. An inbox row is visible only once its
-- statement committed, and an event appended after another committed
-- (the text after its turn's start) has the later id: the log keeps the
-- order in which a run's events happened.
CREATE FUNCTION agentsaga_number_events(p_workflow_id text) RETURNS bigint
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

-- +goose StatementBegin
-- Appends events to a run's inbox and wakes its readers, who number them;
-- takes no lock. For the triggers of claims and settles.
CREATE FUNCTION agentsaga_append_events(p_workflow_id text, p_keys text[], p_kinds text[],
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
-- A publish of one run's events (a statement of its own): appended to the
-- inbox and numbered at once, with what the inbox held before them.
-- Returns how many of the run's events were new.
CREATE OR REPLACE FUNCTION agentsaga_publish_events(p_workflow_id text, p_keys text[], p_kinds text[],
    p_call_keys text[], p_data jsonb[]) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    -- (Postgres sends a transaction's like notifications once.)
    PERFORM agentsaga_append_events(p_workflow_id, p_keys, p_kinds, p_call_keys, p_data);
    RETURN agentsaga_number_events(p_workflow_id);
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Reads a run's log after p_after, having numbered its inbox first: a
-- reader never waits for a publish to number what the claims appended.
CREATE FUNCTION agentsaga_read_events(p_workflow_id text, p_after bigint, p_limit integer)
RETURNS TABLE (seq bigint, event_key text, kind text, call_key text, data jsonb, at timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM agentsaga_number_events(p_workflow_id);
    RETURN QUERY SELECT r.seq, r.event_key, r.kind, r.call_key, r.data, r.at FROM run_events r
        WHERE r.workflow_id = p_workflow_id AND r.seq > p_after ORDER BY r.seq LIMIT p_limit;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION agentsaga_leaf_call_started() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_args text;
BEGIN
    IF NEW.kind = 'compensation' THEN
        RETURN NULL;
    END IF;
    IF NEW.kind = 'tool' THEN
        SELECT left(arguments, 1000) INTO v_args FROM actions WHERE idempotency_key = NEW.idempotency_key;
    END IF;
    PERFORM agentsaga_append_events(NEW.workflow_id,
        ARRAY[NEW.idempotency_key || '/attempt-' || NEW.attempt || '/started'],
        ARRAY[CASE NEW.kind WHEN 'model' THEN 'turn_started' ELSE 'tool_started' END],
        ARRAY[NEW.idempotency_key],
        ARRAY[jsonb_strip_nulls(jsonb_build_object('attempt', NEW.attempt,
            CASE NEW.kind WHEN 'model' THEN 'model' ELSE 'tool' END, NEW.target, 'arguments', v_args))]);
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- What a model's stored turn says, for its turn_finished event: its text
-- (the first 16 KiB), refusal and the tools it asked for. A result that
-- does not decode gives nothing, never an error: the settle must not fail
-- for the watchers' sake.
CREATE FUNCTION agentsaga_turn_summary(p_result text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v jsonb;
BEGIN
    v := p_result::jsonb;
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'text', left(v ->> 'content', 16384),
        'truncated', CASE WHEN length(v ->> 'content') > 16384 THEN true END,
        'refusal', NULLIF(v ->> 'refusal', ''),
        'tool_calls', (SELECT jsonb_agg(c ->> 'name') FROM jsonb_array_elements(
            CASE WHEN jsonb_typeof(v -> 'tool_calls') = 'array' THEN v -> 'tool_calls' ELSE '[]' END) c)));
EXCEPTION WHEN others THEN
    RETURN '{}';
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION agentsaga_leaf_call_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_prefix text := NEW.idempotency_key || '/attempt-' || NEW.attempt;
    v_result text;
    v_status text;
    v_data   jsonb;
    v_keys   text[];
    v_kinds  text[];
    v_data_a jsonb[];
BEGIN
    IF NEW.kind = 'compensation' THEN
        RETURN NULL;
    END IF;
    v_data := jsonb_build_object('attempt', NEW.attempt, 'outcome', NEW.outcome,
        CASE NEW.kind WHEN 'model' THEN 'model' ELSE 'tool' END, NEW.target);
    IF NEW.outcome = 'ok' THEN
        SELECT result, status INTO v_result, v_status FROM actions WHERE idempotency_key = NEW.idempotency_key;
        v_data := v_data || jsonb_build_object('status', v_status);
        IF NEW.kind = 'model' THEN
            v_data := v_data || agentsaga_turn_summary(v_result);
        ELSE
            v_data := v_data || jsonb_strip_nulls(jsonb_build_object('output', left(v_result, 1000),
                'truncated', CASE WHEN length(v_result) > 1000 THEN true END));
        END IF;
    ELSE
        v_data := v_data || jsonb_build_object('error', left(NEW.error, 1000));
    END IF;
    v_keys := ARRAY[v_prefix || '/finished'];
    v_kinds := ARRAY[CASE NEW.kind WHEN 'model' THEN 'turn_finished' ELSE 'tool_finished' END];
    v_data_a := ARRAY[v_data];
    -- The attempt's streamed text is void; only an attempt that streamed
    -- any has some to void (its first batch is delta-1).
    IF NEW.outcome <> 'ok' AND NEW.kind = 'model' AND EXISTS (
        SELECT 1 FROM run_events WHERE workflow_id = NEW.workflow_id AND event_key = v_prefix || '/delta-1') THEN
        -- (text_delta events are published, never appended: they are in
        -- the log by the time the attempt settles.)
        v_keys := ARRAY[v_prefix || '/discarded'] || v_keys;
        v_kinds := ARRAY['attempt_discarded'] || v_kinds;
        v_data_a := ARRAY[jsonb_build_object('attempt', NEW.attempt, 'why', left(NEW.error, 1000))] || v_data_a;
    END IF;
    PERFORM agentsaga_append_events(NEW.workflow_id, v_keys, v_kinds,
        array_fill(NEW.idempotency_key, ARRAY[cardinality(v_keys)]), v_data_a);
    RETURN NULL;
END $$;
-- +goose StatementEnd

CREATE TRIGGER leaf_calls_started AFTER INSERT ON leaf_calls
    FOR EACH ROW EXECUTE FUNCTION agentsaga_leaf_call_started();
CREATE TRIGGER leaf_calls_ended AFTER UPDATE OF outcome ON leaf_calls
    FOR EACH ROW WHEN (OLD.outcome = 'in-flight' AND NEW.outcome <> 'in-flight')
    EXECUTE FUNCTION agentsaga_leaf_call_ended();

-- +goose Down
DROP TRIGGER leaf_calls_ended ON leaf_calls;
DROP TRIGGER leaf_calls_started ON leaf_calls;
DROP FUNCTION agentsaga_leaf_call_ended();
DROP FUNCTION agentsaga_turn_summary(text);
DROP FUNCTION agentsaga_leaf_call_started();
DROP FUNCTION agentsaga_read_events(text, bigint, integer);
DROP FUNCTION agentsaga_append_events(text, text[], text[], text[], jsonb[]);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION agentsaga_publish_events(p_workflow_id text, p_keys text[], p_kinds text[],
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
DROP FUNCTION agentsaga_number_events(text);
DROP TABLE run_event_inbox;
