-- +goose Up

-- A successful call used to take four statements of its own: the claim, the
-- leaf call's insert, the leaf call's end and the completion; a model turn
-- added the messages it appends and two reads of the conversation. Now an
-- attempt claims its key and records its leaf call in one statement
-- (agentsaga_claim_call), a model turn's claim also writes the messages the
-- workflow appends and reads the conversation it sends (agentsaga_claim_turn),
-- and the completion ends the leaf call in its own statement (the ledger's
-- settle). Each is as atomic as the statements it replaces: the claim still
-- reads its run's row FOR SHARE, so it serializes with a rollback's close
-- (see CloseRun) and a run's finish.
--
-- The statements of older builds (their claim, leaf-call and conversation
-- queries) work on this schema unchanged, so both can share a ledger during
-- a deploy.

-- actions.compensation_id references actions(id) and no statement sets it,
-- but every deleted action (pruning, the ledger benchmark's clean-up) still
-- has Postgres look for rows that reference it: without an index, a scan
-- of the whole table per deleted row (38 ms a row at 300,000 actions). The
-- index holds only the rows that set it: none, so no write pays for it.
CREATE INDEX actions_compensation_id ON actions (compensation_id) WHERE compensation_id IS NOT NULL;

-- +goose StatementBegin
-- Claims p_key for one attempt, holding it for p_lease_ms, and records the
-- attempt's leaf call (unless p_leaf_kind is empty) in the same statement.
-- claim says what happened:
--   claimed    the caller holds the key: action is its row (attempts is the
--              claim number to settle it with), leaf_call_id its leaf call;
--   stored     the key completed or was rejected: action holds the outcome;
--   conflict   another request (tool and arguments) holds the key;
--   fenced     no attempt may claim the key: the action's fence_reason says
--              why, or run_fence ('run-ended', 'rollback-begun');
--   in-flight  another attempt holds a live lease.
-- No row at all: the run refuses claims and the key was never claimed.
--   SELECT claim, (action).attempts, leaf_call_id FROM agentsaga_claim_call(
--       'wf/step-001-call-1-charge', 'wf', 'step-001-call-1-charge', 'charge', '{"amount":5}', '<sha256>',
--       10000, '', '', '', 'tool', 1, 'tool', 'charge');
CREATE FUNCTION agentsaga_claim_call(
    p_key text, p_workflow_id text, p_activity_id text, p_tool text, p_arguments text, p_fingerprint text,
    p_lease_ms bigint, p_compensation_tool text, p_compensation_arguments text, p_compensates text, p_kind text,
    p_leaf_attempt integer, p_leaf_kind text, p_leaf_target text)
RETURNS TABLE (claim text, run_fence text, leaf_call_id bigint, action actions)
LANGUAGE plpgsql
AS $$
DECLARE
    v_finished boolean;
    v_closing  boolean;
    v_refused  boolean;
    r          actions%ROWTYPE;
BEGIN
    SELECT x.finished_at IS NOT NULL, x.closing_at IS NOT NULL INTO v_finished, v_closing
    FROM runs x WHERE x.workflow_id = p_workflow_id FOR SHARE;
    v_finished := coalesce(v_finished, false);
    -- A rollback fences the run's forward actions; its compensations may
    -- still be claimed until the run ends.
    v_refused := v_finished OR (coalesce(v_closing, false) AND coalesce(p_compensates, '') = '');
    IF NOT v_refused THEN
        INSERT INTO actions AS a (idempotency_key, workflow_id, activity_id, tool, arguments, request_fingerprint,
                                  status, locked_until, compensates, kind)
        VALUES (p_key, p_workflow_id, p_activity_id, p_tool, p_arguments, p_fingerprint,
                'started', clock_timestamp() + p_lease_ms * interval '1 millisecond', NULLIF(p_compensates, ''),
                coalesce(NULLIF(p_kind, ''), 'tool'))
        ON CONFLICT (idempotency_key) DO UPDATE
        SET status = 'started', attempts = a.attempts + 1, error = '', error_type = '',
            locked_until = EXCLUDED.locked_until, updated_at = clock_timestamp()
        WHERE a.request_fingerprint = EXCLUDED.request_fingerprint
          AND a.fenced_at IS NULL
          AND (a.status = 'failed' OR (a.status = 'started' AND a.locked_until < clock_timestamp()))
        RETURNING a.* INTO r;
        IF FOUND THEN
            -- The compensation is registered before the action is attempted.
            IF coalesce(p_compensation_tool, '') <> '' THEN
                INSERT INTO compensations (forward_key, workflow_id, forward_activity_id, tool, arguments_template)
                VALUES (r.idempotency_key, r.workflow_id, r.activity_id, p_compensation_tool, p_compensation_arguments)
                ON CONFLICT (forward_key) DO NOTHING;
            END IF;
            -- A takeover: the attempt that held the key before was lost.
            UPDATE leaf_calls l SET outcome = 'lost', finished_at = clock_timestamp(),
                   error = 'the attempt was lost: a later attempt took its key over'
            WHERE l.idempotency_key = p_key AND l.outcome = 'in-flight';
            IF coalesce(p_leaf_kind, '') <> '' THEN
                INSERT INTO leaf_calls (workflow_id, activity_id, idempotency_key, attempt, kind, target)
                VALUES (p_workflow_id, p_activity_id, p_key, p_leaf_attempt, p_leaf_kind, p_leaf_target)
                RETURNING id INTO leaf_call_id;
            END IF;
            claim := 'claimed';
            action := r;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;
    -- Nothing was claimed: say why, from the row as it is now (a statement
    -- of its own, so it sees the row the insert found).
    SELECT * INTO r FROM actions a WHERE a.idempotency_key = p_key;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF r.request_fingerprint <> p_fingerprint THEN
        claim := 'conflict';
    ELSIF r.status IN ('completed', 'rejected') THEN
        -- Handing back a stored outcome executes nothing, fenced or not.
        claim := 'stored';
    ELSIF r.fenced_at IS NOT NULL THEN
        claim := 'fenced';
    ELSIF v_refused THEN
        claim := 'fenced';
        run_fence := CASE WHEN v_finished THEN 'run-ended' ELSE 'rollback-begun' END;
    ELSE
        claim := 'in-flight';
    END IF;
    action := r;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- What a model request leaves out to fit p_budget tokens, decided from the
-- conversation's sizes alone (one element per message, in seq order):
-- every unpinned tool output before cut_before that is longer than
-- p_cut_bytes is sent as a preview (counted as at most p_cut_tokens), and
-- every unpinned message before omit_before is left out (omitted turns).
-- First the oldest outputs shrink to previews, oldest first, keeping the
-- last p_kept_turns turns whole, then only the last turn; when previews
-- still do not fit (a very long run), the oldest turns are left out whole,
-- never the last; only then do the last turn's outputs shrink too. Pinned
-- messages are always sent. p_trailing is what follows the conversation
-- (the budget note, instructions, tool definitions) and p_note_tokens the
-- room for the note that says what was left out. p_budget <= 0: no budget.
-- A message's size is its writer's token estimate, or its bytes + 8.
-- The arrays are fixed-width (roles as flags) so that reading element i is
-- O(1).
CREATE FUNCTION agentsaga_fit_plan(
    p_seqs integer[], p_assistant boolean[], p_tool boolean[], p_pinned boolean[], p_tokens integer[], p_bytes integer[],
    p_trailing integer, p_budget integer, p_cut_bytes integer, p_cut_tokens integer, p_note_tokens integer,
    p_kept_turns integer, OUT cut_before integer, OUT omit_before integer, OUT omitted integer)
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    n           integer := coalesce(cardinality(p_seqs), 0);
    tok         integer[];
    total       bigint := p_trailing + p_note_tokens;
    v_from      integer := 0; -- indexes below are 0-based; arrays are read at index + 1
    v_kept      integer;
    v_protected integer;
    v_last      integer;
    v_short     integer;
    i           integer;
    j           integer;
    turns       integer;
BEGIN
    cut_before := 0;
    omit_before := 0;
    omitted := 0;
    tok := array_fill(0, ARRAY[greatest(n, 1)]);
    FOR i IN 1..n LOOP
        tok[i] := CASE WHEN p_tokens[i] > 0 THEN p_tokens[i] ELSE p_bytes[i] + 8 END;
        total := total + tok[i];
    END LOOP;
    -- The phases in order: keep the last p_kept_turns turns whole, then the
    -- last one (a cut), leave out the oldest turns (-1), then cut the rest.
    FOREACH v_kept IN ARRAY ARRAY[p_kept_turns, 1, -1, 0] LOOP
        IF v_kept >= 0 THEN
            -- Where the last v_kept assistant turns begin.
            i := n;
            turns := 0;
            WHILE i > 0 AND turns < v_kept LOOP
                i := i - 1;
                IF p_assistant[i + 1] THEN
                    turns := turns + 1;
                END IF;
            END LOOP;
            v_protected := i;
            i := v_from;
            WHILE i < v_protected AND p_budget > 0 AND total > p_budget LOOP
                cut_before := p_seqs[i + 1] + 1;
                IF NOT p_pinned[i + 1] AND p_tool[i + 1] AND p_bytes[i + 1] > p_cut_bytes THEN
                    v_short := least(p_cut_tokens, tok[i + 1]);
                    total := total + v_short - tok[i + 1];
                    tok[i + 1] := v_short;
                END IF;
                i := i + 1;
            END LOOP;
            v_from := greatest(v_from, v_protected);
        ELSE
            -- Whole turns (an assistant message and its tool results),
            -- oldest first, never the last.
            v_last := v_from;
            i := 0;
            WHILE i < v_last AND p_budget > 0 AND total > p_budget LOOP
                IF NOT p_assistant[i + 1] THEN
                    i := i + 1;
                    CONTINUE;
                END IF;
                j := i + 1;
                WHILE j < n AND p_tool[j + 1] LOOP
                    j := j + 1;
                END LOOP;
                EXIT WHEN j > v_last;
                FOR k IN i..j - 1 LOOP
                    IF NOT p_pinned[k + 1] THEN
                        total := total - tok[k + 1];
                    END IF;
                END LOOP;
                omit_before := p_seqs[j] + 1;
                omitted := omitted + 1;
                i := j;
            END LOOP;
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A model turn's claim, in one statement: writes the messages the workflow
-- appends (p_append_*, as the ledger's AppendMessages; a seq already written
-- keeps its first content), claims the turn's key as agentsaga_claim_call
-- does and, once claimed, reads the conversation of p_conversation before
-- p_through as agentsaga_fit_plan fits it: window_* hold the messages sent,
-- in seq order, each cut output read only to its first p_cut_bytes
-- characters (window_bytes has every message's whole length). The
-- conversation is read after the messages are written, in this statement.
CREATE FUNCTION agentsaga_claim_turn(
    p_key text, p_workflow_id text, p_activity_id text, p_tool text, p_arguments text, p_fingerprint text,
    p_lease_ms bigint, p_leaf_attempt integer, p_leaf_target text,
    p_conversation text, p_append_seqs integer[], p_append_roles text[], p_append_contents text[],
    p_append_tool_calls text[], p_append_tool_call_ids text[], p_append_names text[], p_append_pinned boolean[],
    p_append_source_keys text[], p_append_tokens integer[],
    p_through integer, p_trailing integer, p_budget integer, p_cut_bytes integer, p_cut_tokens integer,
    p_note_tokens integer, p_kept_turns integer)
RETURNS TABLE (claim text, run_fence text, leaf_call_id bigint, action actions,
               cut_before integer, omit_before integer, omitted integer,
               window_seqs integer[], window_roles text[], window_contents text[], window_tool_calls text[],
               window_tool_call_ids text[], window_names text[], window_pinned boolean[], window_source_keys text[],
               window_tokens integer[], window_bytes integer[])
LANGUAGE plpgsql
AS $$
DECLARE
    c           record;
    v_seqs      integer[];
    v_assistant boolean[];
    v_tool      boolean[];
    v_pinned    boolean[];
    v_tokens    integer[];
    v_bytes     integer[];
    p           record;
BEGIN
    IF coalesce(cardinality(p_append_seqs), 0) > 0 THEN
        INSERT INTO messages (workflow_id, seq, role, content, tool_calls, tool_call_id, name, pinned, source_key, tokens)
        SELECT p_conversation, m.seq, m.role, m.content, m.tool_calls::jsonb, m.tool_call_id, m.name, m.pinned,
               m.source_key, m.tokens
        FROM unnest(p_append_seqs, p_append_roles, p_append_contents, p_append_tool_calls, p_append_tool_call_ids,
                    p_append_names, p_append_pinned, p_append_source_keys, p_append_tokens)
             AS m(seq, role, content, tool_calls, tool_call_id, name, pinned, source_key, tokens)
        ON CONFLICT (workflow_id, seq) DO NOTHING;
    END IF;

    SELECT * INTO c FROM agentsaga_claim_call(p_key, p_workflow_id, p_activity_id, p_tool, p_arguments, p_fingerprint,
        p_lease_ms, '', '', '', 'model', p_leaf_attempt, 'model', p_leaf_target);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    claim := c.claim;
    run_fence := c.run_fence;
    leaf_call_id := c.leaf_call_id;
    action := c.action;
    cut_before := 0;
    omit_before := 0;
    omitted := 0;
    IF claim = 'claimed' THEN
        SELECT coalesce(array_agg(m.seq ORDER BY m.seq), '{}'), coalesce(array_agg(m.role = 'assistant' ORDER BY m.seq), '{}'),
               coalesce(array_agg(m.role = 'tool' ORDER BY m.seq), '{}'), coalesce(array_agg(m.pinned ORDER BY m.seq), '{}'),
               coalesce(array_agg(m.tokens ORDER BY m.seq), '{}'), coalesce(array_agg(octet_length(m.content) ORDER BY m.seq), '{}')
        INTO v_seqs, v_assistant, v_tool, v_pinned, v_tokens, v_bytes
        FROM messages m WHERE m.workflow_id = p_conversation AND m.seq < p_through;
        SELECT * INTO p FROM agentsaga_fit_plan(v_seqs, v_assistant, v_tool, v_pinned, v_tokens, v_bytes,
            p_trailing, p_budget, p_cut_bytes, p_cut_tokens, p_note_tokens, p_kept_turns);
        cut_before := p.cut_before;
        omit_before := p.omit_before;
        omitted := p.omitted;
        SELECT array_agg(m.seq ORDER BY m.seq), array_agg(m.role ORDER BY m.seq),
               array_agg(CASE WHEN m.seq < cut_before AND m.role = 'tool' AND NOT m.pinned
                                   AND octet_length(m.content) > p_cut_bytes
                              THEN left(m.content, p_cut_bytes) ELSE m.content END ORDER BY m.seq),
               array_agg(coalesce(m.tool_calls::text, '') ORDER BY m.seq), array_agg(m.tool_call_id ORDER BY m.seq),
               array_agg(m.name ORDER BY m.seq), array_agg(m.pinned ORDER BY m.seq),
               array_agg(m.source_key ORDER BY m.seq), array_agg(m.tokens ORDER BY m.seq),
               array_agg(octet_length(m.content) ORDER BY m.seq)
        INTO window_seqs, window_roles, window_contents, window_tool_calls, window_tool_call_ids, window_names,
             window_pinned, window_source_keys, window_tokens, window_bytes
        FROM messages m
        WHERE m.workflow_id = p_conversation AND m.seq < p_through AND (m.seq >= omit_before OR m.pinned);
    END IF;
    window_seqs := coalesce(window_seqs, '{}');
    window_roles := coalesce(window_roles, '{}');
    window_contents := coalesce(window_contents, '{}');
    window_tool_calls := coalesce(window_tool_calls, '{}');
    window_tool_call_ids := coalesce(window_tool_call_ids, '{}');
    window_names := coalesce(window_names, '{}');
    window_pinned := coalesce(window_pinned, '{}');
    window_source_keys := coalesce(window_source_keys, '{}');
    window_tokens := coalesce(window_tokens, '{}');
    window_bytes := coalesce(window_bytes, '{}');
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_claim_turn(text, text, text, text, text, text, bigint, integer, text, text, integer[], text[],
    text[], text[], text[], text[], boolean[], text[], integer[], integer, integer, integer, integer, integer, integer,
    integer);
DROP FUNCTION agentsaga_fit_plan(integer[], boolean[], boolean[], boolean[], integer[], integer[], integer, integer,
    integer, integer, integer, integer);
DROP FUNCTION agentsaga_claim_call(text, text, text, text, text, text, bigint, text, text, text, text, integer, text, text);
DROP INDEX actions_compensation_id;
