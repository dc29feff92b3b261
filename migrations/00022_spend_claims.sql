-- +goose Up

-- A model turn charged to an account reserves its most expensive outcome
-- in the statement that claims its key (issue 31), as quota admission
-- does (00016): a turn with room still costs two statements, the claim
-- and the settle. The most expensive outcome is the prompt's tokens, as
-- the conversation's estimates count them (each errs high: the
-- tokenizer's count plus a fifth, plus framing), at most the fit budget
-- the request is cut to, at the input price, plus max_tokens at the
-- output price. A turn the account's caps cannot pay for is not claimed:
-- everything the claim did (messages written, quota admitted, key
-- claimed) is undone, and it is told which cap binds and when it resets.

-- A cap may also be per minute: a burst cap, which also lets a run that
-- waits for its cap (on_exhausted: wait) be seen to resume in a test.
ALTER TABLE spend_caps DROP CONSTRAINT spend_caps_period_check,
    ADD CONSTRAINT spend_caps_period_check CHECK (period IN ('minute', 'hour', 'day', 'month'));

-- +goose StatementBegin
-- The tokens a turn's request may take at most: what follows the
-- conversation (p_trailing) and every message before p_through, by its
-- estimate (or its bytes and framing, where it has none), capped at the
-- fit budget p_budget (0: none). The same count as 00016's admission.
CREATE FUNCTION agentsaga_turn_input_tokens(p_conversation text, p_through integer, p_trailing integer, p_budget integer)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_budget > 0 THEN least(v.total, p_budget) ELSE v.total END
    FROM (SELECT p_trailing + coalesce(sum(CASE WHEN m.tokens > 0 THEN m.tokens ELSE octet_length(m.content) + 8 END), 0) AS total
          FROM messages m WHERE m.workflow_id = p_conversation AND m.seq < p_through) v
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- agentsaga_claim_quota_turn, then, when the turn is claimed and
-- p_account is set, a reservation of its most expensive outcome on the
-- account's caps (agentsaga_spend_reserve, held for p_lease_ms; a
-- finishing turn, p_finishing, may use the caps' finishing reserve). Refused,
-- the claim is undone and claim is 'spend', with the cap that binds in
-- the spend_* columns. Claimed, spend_usd is what was reserved, and the
-- spend_* columns describe the cap with the least room left.
CREATE FUNCTION agentsaga_claim_spend_turn(
    p_key text, p_workflow_id text, p_activity_id text, p_tool text, p_arguments text, p_fingerprint text,
    p_lease_ms bigint, p_leaf_attempt integer, p_leaf_target text,
    p_conversation text, p_append_seqs integer[], p_append_roles text[], p_append_contents text[],
    p_append_tool_calls text[], p_append_tool_call_ids text[], p_append_names text[], p_append_pinned boolean[],
    p_append_source_keys text[], p_append_tokens integer[],
    p_through integer, p_trailing integer, p_budget integer, p_cut_bytes integer, p_cut_tokens integer,
    p_note_tokens integer, p_kept_turns integer,
    p_quota_key text, p_quota_output bigint, p_quota_lease_ms float8,
    p_account text, p_input_usd_per_mtok numeric, p_output_usd_per_mtok numeric, p_output_tokens bigint, p_finishing boolean)
RETURNS TABLE (claim text, run_fence text, leaf_call_id bigint, action actions,
               cut_before integer, omit_before integer, omitted integer,
               window_seqs integer[], window_roles text[], window_contents text[], window_tool_calls text[],
               window_tool_call_ids text[], window_names text[], window_pinned boolean[], window_source_keys text[],
               window_tokens integer[], window_bytes integer[],
               quota_admitted boolean, quota_input bigint, quota_retry_at timestamptz, quota_reason text,
               spend_usd numeric, spend_account text, spend_period text, spend_cap numeric, spend_spent numeric,
               spend_reserved numeric, spend_resets timestamptz, spend_on_exhausted text, spend_room numeric)
LANGUAGE plpgsql
AS $$
DECLARE
    c          record;
    s          record;
    v_usd      numeric := 0;
    v_reserved boolean := false;
BEGIN
    BEGIN
        SELECT * INTO c FROM agentsaga_claim_quota_turn(p_key, p_workflow_id, p_activity_id, p_tool, p_arguments, p_fingerprint,
            p_lease_ms, p_leaf_attempt, p_leaf_target, p_conversation, p_append_seqs, p_append_roles, p_append_contents,
            p_append_tool_calls, p_append_tool_call_ids, p_append_names, p_append_pinned, p_append_source_keys,
            p_append_tokens, p_through, p_trailing, p_budget, p_cut_bytes, p_cut_tokens, p_note_tokens, p_kept_turns,
            p_quota_key, p_quota_output, p_quota_lease_ms);
        IF c.claim = 'claimed' AND coalesce(p_account, '') <> '' THEN
            v_usd := (agentsaga_turn_input_tokens(p_conversation, p_through, p_trailing, p_budget) * p_input_usd_per_mtok
                      + p_output_tokens * p_output_usd_per_mtok) / 1000000;
            SELECT * INTO s FROM agentsaga_spend_reserve(p_key, p_account, v_usd, p_lease_ms, p_finishing);
            IF NOT s.admitted THEN
                RAISE EXCEPTION 'spend cap' USING ERRCODE = 'AS001';
            END IF;
            v_reserved := true;
        END IF;
    EXCEPTION WHEN SQLSTATE 'AS001' THEN
        -- The block's work is undone; c and s keep what they read.
        claim := 'spend';
        action := c.action;
        action.status := 'spend';
        cut_before := 0;
        omit_before := 0;
        omitted := 0;
        quota_admitted := false; -- undone with the claim
        quota_input := 0;
        spend_usd := v_usd;
        spend_account := s.account;
        spend_period := s.period;
        spend_cap := s.cap;
        spend_spent := s.spent;
        spend_reserved := s.reserved;
        spend_resets := s.resets;
        spend_on_exhausted := s.on_exhausted;
        spend_room := s.room;
        RETURN NEXT;
        RETURN;
    END;
    claim := c.claim; run_fence := c.run_fence; leaf_call_id := c.leaf_call_id; action := c.action;
    cut_before := c.cut_before; omit_before := c.omit_before; omitted := c.omitted;
    window_seqs := c.window_seqs; window_roles := c.window_roles; window_contents := c.window_contents;
    window_tool_calls := c.window_tool_calls; window_tool_call_ids := c.window_tool_call_ids; window_names := c.window_names;
    window_pinned := c.window_pinned; window_source_keys := c.window_source_keys; window_tokens := c.window_tokens;
    window_bytes := c.window_bytes;
    quota_admitted := c.quota_admitted; quota_input := c.quota_input; quota_retry_at := c.quota_retry_at;
    quota_reason := c.quota_reason;
    spend_usd := v_usd;
    IF v_reserved THEN -- the cap with the least room left, for the budget note
        spend_account := s.account; spend_period := s.period; spend_cap := s.cap; spend_spent := s.spent;
        spend_reserved := s.reserved; spend_resets := s.resets; spend_on_exhausted := s.on_exhausted; spend_room := s.room;
    END IF;
    RETURN NEXT;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Settles a turn's reservation from the statement that settles its
-- attempt (SettleAttempt): p_usd is what the provider's reported usage
-- cost. Returns true, so that it can stand in that statement's WHERE.
CREATE FUNCTION agentsaga_spend_answered(p_key text, p_usd numeric)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM agentsaga_spend_settle(p_key, p_usd);
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE spend_caps DROP CONSTRAINT spend_caps_period_check,
    ADD CONSTRAINT spend_caps_period_check CHECK (period IN ('hour', 'day', 'month'));
DROP FUNCTION agentsaga_spend_answered(text, numeric);
DROP FUNCTION agentsaga_claim_spend_turn(text, text, text, text, text, text, bigint, integer, text, text, integer[], text[],
    text[], text[], text[], text[], boolean[], text[], integer[], integer, integer, integer, integer, integer, integer, integer,
    text, bigint, float8, text, numeric, numeric, bigint, boolean);
DROP FUNCTION agentsaga_turn_input_tokens(text, integer, integer, integer);
