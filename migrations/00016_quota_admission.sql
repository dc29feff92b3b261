-- +goose Up

-- Admission in the turn's claim (issue 22): a model turn on a quota key is
-- admitted by the statement that claims its key, so a turn that fits costs
-- no round trip more than it did (two statements: the claim and the
-- settle). A turn that does not fit is not claimed: it is told when it
-- would fit and waits for then on a workflow timer, sending nothing.
--
-- The calls refused meanwhile are handed release slots, as the calls
-- parked behind an open breaker are (00012), so that they come back at the
-- rate the quota refills, one after another, jittered, never in a wave
-- that the row would mostly refuse again: each refusal takes the slot
-- after the last one handed out (next_slot), and moves it on by the time
-- the quota takes to refill what the call costs.
--
-- The row also counts what operators ask about: refused admissions and
-- the seconds they were told to wait, 429s, and the calls waiting now
-- (waiting: the slots not yet reached).
ALTER TABLE quota_limits
    ADD COLUMN next_slot      timestamptz,
    ADD COLUMN waiting        timestamptz[] NOT NULL DEFAULT '{}',
    ADD COLUMN refused        bigint NOT NULL DEFAULT 0,
    ADD COLUMN waited_seconds float8 NOT NULL DEFAULT 0,
    ADD COLUMN rate_limited   bigint NOT NULL DEFAULT 0;

-- +goose StatementBegin
-- Hands a call that agentsaga_quota_admit refused (it would fit at
-- p_fits, or the key is closed until then) its release slot: the later of
-- p_fits and the row's next slot, plus up to half a spacing of jitter. The
-- spacing is the time the key's tightest limit takes to refill what the
-- call costs (p_input and p_output tokens, one request), 50 ms when
-- nothing is limited (a 429 closed a key whose limits are unknown).
-- Returns the slot. Internal helper.
CREATE FUNCTION agentsaga_quota_slot(p_key text, p_fits timestamptz, p_input bigint, p_output bigint)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    r         quota_limits%ROWTYPE;
    v_now     timestamptz := clock_timestamp();
    v_spacing float8;
    v_slot    timestamptz;
BEGIN
    SELECT * INTO r FROM quota_limits q WHERE q.key = p_key FOR UPDATE;
    v_spacing := coalesce(greatest(
        60 / least(r.declared_rpm, r.learned_rpm),
        60 * (p_input + p_output) / least(r.declared_tpm, r.learned_tpm),
        60 * p_input / least(r.declared_itpm, r.learned_itpm),
        60 * p_output / least(r.declared_otpm, r.learned_otpm)), 0.05);
    v_slot := greatest(p_fits, r.next_slot);
    UPDATE quota_limits q
    SET next_slot = v_slot + v_spacing * interval '1 second',
        waiting = ARRAY(SELECT w FROM unnest(q.waiting) AS w WHERE w > v_now) || v_slot,
        refused = q.refused + 1,
        waited_seconds = q.waited_seconds + greatest(extract(epoch FROM v_slot - v_now), 0)
    WHERE q.key = p_key;
    RETURN v_slot + random() * v_spacing / 2 * interval '1 second';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- agentsaga_claim_turn for a turn on quota key p_quota_key ('' for none):
-- when the claim would send the request (the key is new, failed, or its
-- lease has lapsed, and not fenced), it first admits one request of the
-- conversation's tokens (as agentsaga_fit_plan counts them, at most
-- p_budget) plus p_trailing, and p_quota_output output tokens, holding a
-- concurrency slot for p_quota_lease_ms. Refused, it claims nothing:
-- claim is 'quota' with quota_retry_at the call's release slot and
-- quota_reason why (a reason 'too-large:...' and no slot when the call
-- could never fit); the window is empty. Admitted, it claims as agentsaga_claim_turn does, and
-- quota_admitted and quota_input say what to settle; if the claim then
-- is not made after all (another attempt claimed the key meanwhile,
-- or the run ended), the caller gives the admission back.
CREATE FUNCTION agentsaga_claim_quota_turn(
    p_key text, p_workflow_id text, p_activity_id text, p_tool text, p_arguments text, p_fingerprint text,
    p_lease_ms bigint, p_leaf_attempt integer, p_leaf_target text,
    p_conversation text, p_append_seqs integer[], p_append_roles text[], p_append_contents text[],
    p_append_tool_calls text[], p_append_tool_call_ids text[], p_append_names text[], p_append_pinned boolean[],
    p_append_source_keys text[], p_append_tokens integer[],
    p_through integer, p_trailing integer, p_budget integer, p_cut_bytes integer, p_cut_tokens integer,
    p_note_tokens integer, p_kept_turns integer,
    p_quota_key text, p_quota_output bigint, p_quota_lease_ms float8)
RETURNS TABLE (claim text, run_fence text, leaf_call_id bigint, action actions,
               cut_before integer, omit_before integer, omitted integer,
               window_seqs integer[], window_roles text[], window_contents text[], window_tool_calls text[],
               window_tool_call_ids text[], window_names text[], window_pinned boolean[], window_source_keys text[],
               window_tokens integer[], window_bytes integer[],
               quota_admitted boolean, quota_input bigint, quota_retry_at timestamptz, quota_reason text)
LANGUAGE plpgsql
AS $$
DECLARE
    a       actions%ROWTYPE;
    q       record;
    v_input bigint := 0;
BEGIN
    IF coalesce(p_quota_key, '') <> '' THEN
        SELECT * INTO a FROM actions x WHERE x.idempotency_key = p_key;
        IF NOT FOUND OR (a.fenced_at IS NULL AND a.request_fingerprint = p_fingerprint
                         AND (a.status = 'failed' OR (a.status = 'started' AND a.locked_until < clock_timestamp()))) THEN
            -- The messages this turn appends count toward its request:
            -- they are written first (agentsaga_claim_turn finds them
            -- written), as they would be on the turn's next attempt.
            IF coalesce(cardinality(p_append_seqs), 0) > 0 THEN
                INSERT INTO messages (workflow_id, seq, role, content, tool_calls, tool_call_id, name, pinned, source_key, tokens)
                SELECT p_conversation, m.seq, m.role, m.content, m.tool_calls::jsonb, m.tool_call_id, m.name, m.pinned,
                       m.source_key, m.tokens
                FROM unnest(p_append_seqs, p_append_roles, p_append_contents, p_append_tool_calls, p_append_tool_call_ids,
                            p_append_names, p_append_pinned, p_append_source_keys, p_append_tokens)
                     AS m(seq, role, content, tool_calls, tool_call_id, name, pinned, source_key, tokens)
                ON CONFLICT (workflow_id, seq) DO NOTHING;
            END IF;
            SELECT p_trailing + coalesce(sum(CASE WHEN m.tokens > 0 THEN m.tokens ELSE octet_length(m.content) + 8 END), 0)
            INTO v_input FROM messages m WHERE m.workflow_id = p_conversation AND m.seq < p_through;
            IF p_budget > 0 THEN
                v_input := least(v_input, p_budget);
            END IF;
            SELECT * INTO q FROM agentsaga_quota_admit(p_quota_key, 1, v_input, p_quota_output, p_quota_lease_ms);
            IF NOT q.admitted THEN
                -- Nothing is claimed: action is the key's row as it is,
                -- or, for a key never claimed, the request (id 0).
                IF a.idempotency_key IS NULL THEN
                    a.id := 0; a.idempotency_key := p_key; a.workflow_id := p_workflow_id;
                    a.activity_id := p_activity_id; a.tool := p_tool; a.arguments := p_arguments;
                    a.request_fingerprint := p_fingerprint; a.status := 'quota'; a.error := '';
                    a.error_type := ''; a.attempts := 0; a.fence_reason := ''; a.created_at := clock_timestamp();
                END IF;
                action := a;
                claim := 'quota';
                cut_before := 0;
                omit_before := 0;
                omitted := 0;
                quota_admitted := false;
                quota_input := v_input;
                quota_reason := q.reason;
                IF q.retry_at IS NOT NULL THEN
                    quota_retry_at := agentsaga_quota_slot(p_quota_key, q.retry_at, v_input, p_quota_output);
                END IF;
                RETURN NEXT;
                RETURN;
            END IF;
            quota_admitted := true;
        END IF;
    END IF;
    RETURN QUERY
    SELECT t.*, coalesce(quota_admitted, false), v_input, NULL::timestamptz, NULL::text
    FROM agentsaga_claim_turn(p_key, p_workflow_id, p_activity_id, p_tool, p_arguments, p_fingerprint,
        p_lease_ms, p_leaf_attempt, p_leaf_target, p_conversation, p_append_seqs, p_append_roles, p_append_contents,
        p_append_tool_calls, p_append_tool_call_ids, p_append_names, p_append_pinned, p_append_source_keys,
        p_append_tokens, p_through, p_trailing, p_budget, p_cut_bytes, p_cut_tokens, p_note_tokens, p_kept_turns) t;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- What a model response says about its quota, in one call from the
-- statement that settles the attempt: it settles the admission (when
-- p_settle) to the tokens used, learns the headers (NULL: not said), and,
-- after a 429 (p_closed_until not NULL), closes the key until then and
-- counts it. Returns true. See agentsaga_quota_settle, _learn and _close.
CREATE FUNCTION agentsaga_quota_answered(p_key text, p_settle boolean,
                                         p_reserved_input bigint, p_reserved_output bigint,
                                         p_used_input bigint, p_used_output bigint,
                                         p_rpm float8, p_requests_remaining float8,
                                         p_tpm float8, p_tokens_remaining float8,
                                         p_itpm float8, p_input_remaining float8,
                                         p_otpm float8, p_output_remaining float8,
                                         p_closed_until timestamptz)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    IF coalesce(p_key, '') = '' THEN
        RETURN true;
    END IF;
    IF p_settle THEN
        PERFORM agentsaga_quota_settle(p_key, p_reserved_input, p_reserved_output, p_used_input, p_used_output);
    END IF;
    IF num_nonnulls(p_rpm, p_requests_remaining, p_tpm, p_tokens_remaining,
                    p_itpm, p_input_remaining, p_otpm, p_output_remaining) > 0 THEN
        PERFORM agentsaga_quota_learn(p_key, p_rpm, p_requests_remaining, p_tpm, p_tokens_remaining,
                                      p_itpm, p_input_remaining, p_otpm, p_output_remaining);
    END IF;
    IF p_closed_until IS NOT NULL THEN
        PERFORM agentsaga_quota_close(p_key, p_closed_until);
        UPDATE quota_limits q SET rate_limited = q.rate_limited + 1 WHERE q.key = p_key;
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_quota_answered(text, boolean, bigint, bigint, bigint, bigint, float8, float8, float8, float8,
    float8, float8, float8, float8, timestamptz);
DROP FUNCTION agentsaga_claim_quota_turn(text, text, text, text, text, text, bigint, integer, text, text, integer[],
    text[], text[], text[], text[], text[], boolean[], text[], integer[], integer, integer, integer, integer, integer,
    integer, integer, text, bigint, float8);
DROP FUNCTION agentsaga_quota_slot(text, timestamptz, bigint, bigint);
ALTER TABLE quota_limits DROP COLUMN next_slot, DROP COLUMN waiting, DROP COLUMN refused, DROP COLUMN waited_seconds,
    DROP COLUMN rate_limited;
