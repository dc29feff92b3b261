-- +goose Up

-- Fleet-wide rate limits (issue 22, DESIGN decision 13): a model provider's
-- quota belongs to the account, not to a worker, so every worker admits its
-- requests against one row per quota key (provider:model:fingerprint of the
-- API key, internal/quota.Key).
--
-- The row holds up to four continuously refilled token buckets, as the
-- retry bucket is (00002): requests, tokens (input and output together,
-- OpenAI's TPM), input tokens and output tokens (Anthropic's ITPM and
-- OTPM). Each bucket's capacity is its per-minute limit and it refills at
-- limit/60 a second, so at most capacity + limit/60 x t is admitted over
-- any t seconds. A limit is declared (configuration, a spec) or learned
-- (the provider's headers); the one in force is the lower of the two, so a
-- provider's word replaces the guess unless the team declared less on
-- purpose. A dimension with neither is not limited and its level is NULL.
--
-- Beside the buckets: in_flight, the leases of admitted calls not yet
-- settled (kept only while a concurrency limit is declared; a lease that
-- expires frees its slot, so a worker that died holding one does not leak
-- it), and closed_until: a 429 closes the quota fleet-wide until its
-- Retry-After or reset, and admits nothing before then.
--
-- Every function below locks the row, reads the clock after the lock
-- (never earlier than the row's updated_at, so no span of time is credited
-- twice), refills, decides and writes in one round trip; all times are the
-- database's clock_timestamp(). Admission is therefore serial per key and
-- exact: no two workers can both take the last token.
--
-- One row is one key's ceiling. A single-row UPDATE such as
-- agentsaga_bucket_take runs about 1,700 a second on the development
-- machine; an admission (row lock, refill of four buckets, update) ran at
-- about 0.6 of agentsaga_bucket_take's rate beside it under pgbench, so
-- about 1,000 a second. A turn costs two writes (admit and settle; learn
-- locks and writes only when it corrects something), so one key admits
-- some 500 turns a second, 30,000 a minute: above the request limits
-- providers give one key for one model, except their largest tiers.
-- There are no per-worker leased chunks, so there is no overshoot beyond
-- the bound above; if a key's limit ever comes near this ceiling, chunks
-- leased per worker (the overshoot then bounded by workers x chunk) are
-- the next step.

CREATE TABLE quota_limits (
    key                  text PRIMARY KEY CHECK (key <> ''),
    declared_rpm         float8 CHECK (declared_rpm > 0),
    declared_tpm         float8 CHECK (declared_tpm > 0),
    declared_itpm        float8 CHECK (declared_itpm > 0),
    declared_otpm        float8 CHECK (declared_otpm > 0),
    declared_concurrency integer CHECK (declared_concurrency > 0),
    learned_rpm          float8 CHECK (learned_rpm > 0),
    learned_tpm          float8 CHECK (learned_tpm > 0),
    learned_itpm         float8 CHECK (learned_itpm > 0),
    learned_otpm         float8 CHECK (learned_otpm > 0),
    -- The buckets' levels at updated_at; NULL while not limited. A level
    -- may go below zero when a call used more than it reserved: the debt
    -- is paid by the refill before the next admission.
    requests             float8,
    tokens               float8,
    input_tokens         float8,
    output_tokens        float8,
    in_flight            timestamptz[] NOT NULL DEFAULT '{}',
    closed_until         timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- +goose StatementBegin
-- A bucket's level p_seconds after it held p_level, at p_per_minute: the
-- refill is p_per_minute/60 a second, capped at p_per_minute. NULL when
-- the dimension is not limited; a bucket that was not limited (NULL) and
-- now is starts full. With p_seconds = 0 it reshapes a level to a new
-- limit. Internal helper.
CREATE FUNCTION agentsaga_quota_level(p_level float8, p_per_minute float8, p_seconds float8)
RETURNS float8
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_per_minute IS NULL THEN NULL
                ELSE least(p_per_minute,
                           coalesce(p_level, p_per_minute) + p_per_minute / 60 * greatest(0, p_seconds)) END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The row refilled from its updated_at to p_now under the limits in force,
-- with expired leases dropped. Internal helper.
CREATE FUNCTION agentsaga_quota_refilled(r quota_limits, p_now timestamptz)
RETURNS quota_limits
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_seconds float8 := extract(epoch FROM p_now - r.updated_at)::float8;
BEGIN
    r.requests      := agentsaga_quota_level(r.requests, least(r.declared_rpm, r.learned_rpm), v_seconds);
    r.tokens        := agentsaga_quota_level(r.tokens, least(r.declared_tpm, r.learned_tpm), v_seconds);
    r.input_tokens  := agentsaga_quota_level(r.input_tokens, least(r.declared_itpm, r.learned_itpm), v_seconds);
    r.output_tokens := agentsaga_quota_level(r.output_tokens, least(r.declared_otpm, r.learned_otpm), v_seconds);
    r.in_flight     := ARRAY(SELECT t FROM unnest(r.in_flight) AS t WHERE t > p_now ORDER BY t);
    r.updated_at    := greatest(r.updated_at, p_now);
    RETURN r;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Locks the key's row, creating it (nothing limited) when missing, and
-- returns it refilled to the clock read after the lock. Internal helper.
CREATE FUNCTION agentsaga_quota_lock(p_key text)
RETURNS quota_limits
LANGUAGE plpgsql
AS $$
DECLARE
    r quota_limits%ROWTYPE;
BEGIN
    IF coalesce(p_key, '') = '' THEN
        RAISE EXCEPTION 'agentsaga quota: the key is empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO r FROM quota_limits q WHERE q.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO quota_limits (key) VALUES (p_key) ON CONFLICT DO NOTHING;
        SELECT * INTO r FROM quota_limits q WHERE q.key = p_key FOR UPDATE;
    END IF;
    RETURN agentsaga_quota_refilled(r, greatest(clock_timestamp(), r.updated_at));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Writes a row the functions above returned. Internal helper.
CREATE FUNCTION agentsaga_quota_store(r quota_limits)
RETURNS void
LANGUAGE sql
AS $$
    UPDATE quota_limits q
    SET declared_rpm = r.declared_rpm, declared_tpm = r.declared_tpm,
        declared_itpm = r.declared_itpm, declared_otpm = r.declared_otpm,
        declared_concurrency = r.declared_concurrency,
        learned_rpm = r.learned_rpm, learned_tpm = r.learned_tpm,
        learned_itpm = r.learned_itpm, learned_otpm = r.learned_otpm,
        requests = r.requests, tokens = r.tokens, input_tokens = r.input_tokens, output_tokens = r.output_tokens,
        in_flight = r.in_flight, closed_until = r.closed_until, updated_at = r.updated_at
    WHERE q.key = r.key
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Reshapes the buckets to the limits now in force (after a declared or
-- learned limit changed): each level is capped at its new limit, a newly
-- limited one starts full. Internal helper.
CREATE FUNCTION agentsaga_quota_reshaped(r quota_limits)
RETURNS quota_limits
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    r.requests      := agentsaga_quota_level(r.requests, least(r.declared_rpm, r.learned_rpm), 0);
    r.tokens        := agentsaga_quota_level(r.tokens, least(r.declared_tpm, r.learned_tpm), 0);
    r.input_tokens  := agentsaga_quota_level(r.input_tokens, least(r.declared_itpm, r.learned_itpm), 0);
    r.output_tokens := agentsaga_quota_level(r.output_tokens, least(r.declared_otpm, r.learned_otpm), 0);
    RETURN r;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Declares the key's limits (NULL: not declared), creating its row. Every
-- worker may call it on start; the levels are settled under the old limits
-- and capped at the new ones, and what was learned stays.
--   SELECT agentsaga_quota_ensure('openai:gpt-4o:0a1b2c3d4e5f', 500, 200000, NULL, NULL, 20);
CREATE FUNCTION agentsaga_quota_ensure(p_key text, p_rpm float8, p_tpm float8, p_itpm float8, p_otpm float8,
                                       p_concurrency integer)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r quota_limits%ROWTYPE := agentsaga_quota_lock(p_key);
BEGIN
    r.declared_rpm := p_rpm;
    r.declared_tpm := p_tpm;
    r.declared_itpm := p_itpm;
    r.declared_otpm := p_otpm;
    r.declared_concurrency := p_concurrency;
    PERFORM agentsaga_quota_store(agentsaga_quota_reshaped(r));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Admits one call before it is sent, or says when it would fit. The call
-- reserves p_requests requests, p_input input and p_output output tokens
-- (their sum from the tokens bucket), and, while a concurrency limit is
-- declared, a slot leased for p_lease_ms. Returns:
--   admitted  true: everything was taken (settle it with
--             agentsaga_quota_settle); false: nothing was;
--   retry_at  when not admitted: the earliest time the call could fit, by
--             the refill (or closed_until, or, for a full concurrency
--             limit, the first lease's expiry, at most 1 s ahead). It is
--             not a reservation: admit again then;
--   reason    when not admitted: 'closed', 'requests', 'tokens',
--             'input-tokens', 'output-tokens' or 'concurrency' (the one
--             that waits longest), or 'too-large:<dimension>' when the
--             call needs more than a whole minute's limit and never fits
--             (retry_at NULL);
--   at        the database clock the decision used.
--   SELECT * FROM agentsaga_quota_admit('openai:gpt-4o:0a1b2c3d4e5f', 1, 1200, 1024, 600000);
CREATE FUNCTION agentsaga_quota_admit(p_key text, p_requests integer, p_input bigint, p_output bigint,
                                      p_lease_ms float8,
                                      OUT admitted boolean, OUT retry_at timestamptz, OUT reason text,
                                      OUT at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    r      quota_limits%ROWTYPE;
    v_wait float8 := 0;
    v_need float8;
    v_cap  float8;
    d      record;
BEGIN
    IF p_requests < 0 OR p_input < 0 OR p_output < 0 OR p_lease_ms <= 0 THEN
        RAISE EXCEPTION 'agentsaga_quota_admit: requests %, input tokens %, output tokens % must not be negative and the lease % ms must be positive',
            p_requests, p_input, p_output, p_lease_ms USING ERRCODE = 'invalid_parameter_value';
    END IF;
    r := agentsaga_quota_lock(p_key);
    at := r.updated_at;
    admitted := false;

    FOR d IN SELECT * FROM (VALUES
            (1, 'requests', r.requests, least(r.declared_rpm, r.learned_rpm), p_requests::float8),
            (2, 'tokens', r.tokens, least(r.declared_tpm, r.learned_tpm), (p_input + p_output)::float8),
            (3, 'input-tokens', r.input_tokens, least(r.declared_itpm, r.learned_itpm), p_input::float8),
            (4, 'output-tokens', r.output_tokens, least(r.declared_otpm, r.learned_otpm), p_output::float8)
        ) AS v(i, name, level, cap, cost) ORDER BY i
    LOOP
        CONTINUE WHEN d.cap IS NULL;
        IF d.cost > d.cap THEN
            reason := 'too-large:' || d.name;
            RETURN;
        END IF;
        IF d.level < d.cost THEN
            v_need := (d.cost - d.level) / (d.cap / 60);
            IF v_need > v_wait THEN
                v_wait := v_need;
                reason := d.name;
            END IF;
        END IF;
    END LOOP;

    IF r.closed_until > at THEN
        reason := 'closed';
        retry_at := greatest(r.closed_until, at + v_wait * interval '1 second');
        RETURN;
    END IF;
    IF reason IS NULL AND cardinality(r.in_flight) >= r.declared_concurrency THEN
        reason := 'concurrency';
        retry_at := least(r.in_flight[1], at + interval '1 second');
        RETURN;
    END IF;
    IF reason IS NOT NULL THEN
        retry_at := at + v_wait * interval '1 second';
        RETURN;
    END IF;

    r.requests      := r.requests - p_requests;
    r.tokens        := r.tokens - (p_input + p_output);
    r.input_tokens  := r.input_tokens - p_input;
    r.output_tokens := r.output_tokens - p_output;
    IF r.declared_concurrency IS NOT NULL THEN
        r.in_flight := ARRAY(SELECT t FROM unnest(r.in_flight || (at + p_lease_ms * interval '1 millisecond')) AS t ORDER BY t);
    END IF;
    PERFORM agentsaga_quota_store(r);
    admitted := true;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Settles an admitted call to what it used: the tokens it reserved and did
-- not use go back (capped at each limit); tokens used beyond the
-- reservation are taken, leaving a debt the refill pays. The request is
-- not given back: it was sent. The call's concurrency slot is freed (the
-- lease that expires first: leases are interchangeable, and freeing the
-- earliest errs toward holding slots). Returns false when the key has no
-- row. Not idempotent: settle once per admission.
--   SELECT agentsaga_quota_settle('openai:gpt-4o:0a1b2c3d4e5f', 1200, 1024, 1180, 312);
CREATE FUNCTION agentsaga_quota_settle(p_key text, p_reserved_input bigint, p_reserved_output bigint,
                                       p_used_input bigint, p_used_output bigint)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    r quota_limits%ROWTYPE;
BEGIN
    IF p_reserved_input < 0 OR p_reserved_output < 0 OR p_used_input < 0 OR p_used_output < 0 THEN
        RAISE EXCEPTION 'agentsaga_quota_settle: reserved tokens %+% and used tokens %+% must not be negative',
            p_reserved_input, p_reserved_output, p_used_input, p_used_output USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM quota_limits q WHERE q.key = p_key) THEN
        RETURN false;
    END IF;
    r := agentsaga_quota_lock(p_key);
    r.tokens := least(least(r.declared_tpm, r.learned_tpm),
                      r.tokens + (p_reserved_input + p_reserved_output) - (p_used_input + p_used_output));
    r.input_tokens := least(least(r.declared_itpm, r.learned_itpm), r.input_tokens + p_reserved_input - p_used_input);
    r.output_tokens := least(least(r.declared_otpm, r.learned_otpm), r.output_tokens + p_reserved_output - p_used_output);
    r.in_flight := r.in_flight[2:];
    PERFORM agentsaga_quota_store(r);
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Closes the key fleet-wide until p_until (a 429's Retry-After or reset):
-- every admission before then is refused with reason 'closed'. A later
-- close extends, an earlier one never shortens it. Returns the time the
-- key is closed until.
--   SELECT agentsaga_quota_close('openai:gpt-4o:0a1b2c3d4e5f', now() + interval '20 seconds');
CREATE FUNCTION agentsaga_quota_close(p_key text, p_until timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    r quota_limits%ROWTYPE;
BEGIN
    IF p_until IS NULL THEN
        RAISE EXCEPTION 'agentsaga_quota_close: the time to close until is NULL' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    r := agentsaga_quota_lock(p_key);
    IF r.closed_until IS NULL OR r.closed_until < p_until THEN
        r.closed_until := p_until;
        PERFORM agentsaga_quota_store(r);
    END IF;
    RETURN r.closed_until;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The row r with what a response's headers say applied (NULL: not said):
-- see agentsaga_quota_learn. Internal helper.
CREATE FUNCTION agentsaga_quota_learned(r quota_limits,
                                        p_rpm float8, p_requests_remaining float8,
                                        p_tpm float8, p_tokens_remaining float8,
                                        p_itpm float8, p_input_remaining float8,
                                        p_otpm float8, p_output_remaining float8)
RETURNS quota_limits
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    r.learned_rpm  := coalesce(p_rpm, r.learned_rpm);
    r.learned_tpm  := coalesce(p_tpm, r.learned_tpm);
    r.learned_itpm := coalesce(p_itpm, r.learned_itpm);
    r.learned_otpm := coalesce(p_otpm, r.learned_otpm);
    r := agentsaga_quota_reshaped(r);
    -- A remaining count alone does not limit: a level not limited stays
    -- NULL (least() would take the count).
    r.requests      := CASE WHEN r.requests IS NOT NULL THEN least(r.requests, p_requests_remaining) END;
    r.tokens        := CASE WHEN r.tokens IS NOT NULL THEN least(r.tokens, p_tokens_remaining) END;
    r.input_tokens  := CASE WHEN r.input_tokens IS NOT NULL THEN least(r.input_tokens, p_input_remaining) END;
    r.output_tokens := CASE WHEN r.output_tokens IS NOT NULL THEN least(r.output_tokens, p_output_remaining) END;
    RETURN r;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Learns what a response's headers say (NULL: not said): a limit replaces
-- the learned one (the lower of declared and learned is in force), and a
-- remaining count lowers the bucket's level to it when the provider has
-- less left than the row thinks (it also counts traffic the fleet does not
-- see). A remaining count never raises a level: the row also counts calls
-- admitted but not yet seen by the provider.
--
-- Most responses say what the row already knows. Those cost no write and
-- no lock: an unlocked read decides first. It may read a row a concurrent
-- admission has since lowered; then a remaining count that was not below
-- the older level is not below the newer one either, so skipping is right.
-- (A learned limit that a concurrent response has just changed to another
-- value stays as that one said: both are the provider's word.)
--   SELECT agentsaga_quota_learn('openai:gpt-4o:0a1b2c3d4e5f', 500, 499, 200000, 198000, NULL, NULL, NULL, NULL);
CREATE FUNCTION agentsaga_quota_learn(p_key text,
                                      p_rpm float8, p_requests_remaining float8,
                                      p_tpm float8, p_tokens_remaining float8,
                                      p_itpm float8, p_input_remaining float8,
                                      p_otpm float8, p_output_remaining float8)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    r quota_limits%ROWTYPE;
BEGIN
    IF p_rpm <= 0 OR p_tpm <= 0 OR p_itpm <= 0 OR p_otpm <= 0
       OR p_requests_remaining < 0 OR p_tokens_remaining < 0 OR p_input_remaining < 0 OR p_output_remaining < 0 THEN
        RAISE EXCEPTION 'agentsaga_quota_learn: limits must be positive and remaining counts not negative'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT * INTO r FROM quota_limits q WHERE q.key = p_key;
    IF FOUND THEN
        r := agentsaga_quota_refilled(r, greatest(clock_timestamp(), r.updated_at));
        IF agentsaga_quota_learned(r, p_rpm, p_requests_remaining, p_tpm, p_tokens_remaining,
                                   p_itpm, p_input_remaining, p_otpm, p_output_remaining) IS NOT DISTINCT FROM r THEN
            RETURN;
        END IF;
    END IF;
    r := agentsaga_quota_lock(p_key);
    PERFORM agentsaga_quota_store(agentsaga_quota_learned(r, p_rpm, p_requests_remaining, p_tpm, p_tokens_remaining,
                                                          p_itpm, p_input_remaining, p_otpm, p_output_remaining));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The key's state now, refill included; writes and locks nothing. No row
-- when the key has none. The limits are those in force (NULL: not
-- limited); in_flight counts unexpired leases.
--   SELECT * FROM agentsaga_quota_state('openai:gpt-4o:0a1b2c3d4e5f');
CREATE FUNCTION agentsaga_quota_state(p_key text)
RETURNS TABLE (rpm float8, tpm float8, itpm float8, otpm float8, concurrency integer,
               requests float8, tokens float8, input_tokens float8, output_tokens float8,
               in_flight integer, closed_until timestamptz, updated_at timestamptz, at timestamptz)
LANGUAGE sql
AS $$
    SELECT least(s.declared_rpm, s.learned_rpm), least(s.declared_tpm, s.learned_tpm),
           least(s.declared_itpm, s.learned_itpm), least(s.declared_otpm, s.learned_otpm),
           s.declared_concurrency, s.requests, s.tokens, s.input_tokens, s.output_tokens,
           cardinality(s.in_flight), s.closed_until, q.updated_at, s.updated_at
    FROM quota_limits q
    CROSS JOIN LATERAL agentsaga_quota_refilled(q, greatest(clock_timestamp(), q.updated_at)) AS s
    WHERE q.key = p_key
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION agentsaga_quota_state(text);
DROP FUNCTION agentsaga_quota_learn(text, float8, float8, float8, float8, float8, float8, float8, float8);
DROP FUNCTION agentsaga_quota_learned(quota_limits, float8, float8, float8, float8, float8, float8, float8, float8);
DROP FUNCTION agentsaga_quota_close(text, timestamptz);
DROP FUNCTION agentsaga_quota_settle(text, bigint, bigint, bigint, bigint);
DROP FUNCTION agentsaga_quota_admit(text, integer, bigint, bigint, float8);
DROP FUNCTION agentsaga_quota_ensure(text, float8, float8, float8, float8, integer);
DROP FUNCTION agentsaga_quota_reshaped(quota_limits);
DROP FUNCTION agentsaga_quota_store(quota_limits);
DROP FUNCTION agentsaga_quota_lock(text);
DROP FUNCTION agentsaga_quota_refilled(quota_limits, timestamptz);
DROP FUNCTION agentsaga_quota_level(float8, float8, float8);
DROP TABLE quota_limits;
