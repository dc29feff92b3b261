-- +goose Up

-- Webhooks (issue 44): people are told when a run waits for them, as
-- Standard Webhooks signs and numbers its messages. An endpoint is a URL
-- that hears some kinds of event for one account's runs (and its
-- sub-accounts'), or for every run ('' account).
--
-- Its secret is kept as given to the receiver (whsec_ and base64): an HMAC
-- signs with the secret itself, so it cannot be kept as a hash. A rotation
-- keeps the secret it replaced in previous_secret until previous_until (24
-- hours): both sign in that time, so a receiver may change its copy at any
-- moment of the day.
CREATE TABLE webhook_endpoints (
    id              text PRIMARY KEY,
    account         text NOT NULL DEFAULT '',
    url             text NOT NULL,
    events          text[] NOT NULL CHECK (cardinality(events) > 0),
    format          text NOT NULL DEFAULT 'standard' CHECK (format IN ('standard', 'slack')),
    secret          text NOT NULL,
    previous_secret text,
    previous_until  timestamptz,
    allow_private   boolean NOT NULL DEFAULT false,
    -- JSON paths ($.customer.email) replaced in an approval's arguments, as
    -- a dataset's --redact replaces them (internal/dataset).
    redact          text[] NOT NULL DEFAULT '{}',
    created_by      text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    rotated_at      timestamptz,
    disabled_at     timestamptz,
    disabled_reason text NOT NULL DEFAULT '',
    -- Attempts that failed in a row, whatever their delivery: a receiver
    -- that answers most requests is retried soon, one that answers none
    -- backs off (internal/webhooks' Schedule). A 2xx resets it.
    failure_streak  integer NOT NULL DEFAULT 0
);

-- The outbox: one row an event an endpoint hears, written in the statement
-- that stores the event (the trigger below), so nothing that was logged is
-- left untold. id is the message's webhook-id, the same on every attempt.
-- A run's deliveries to one endpoint go out in the order of its log
-- (event_seq): one is claimed only when no earlier one is undelivered
-- (pending or failed). A claim takes a lease (lease_owner, lease_until,
-- lease_token): the process that holds it sends; one that died mid-send
-- leaves it to expire, and the next claim sends it again under the same id.
--
-- status: pending (not sent yet), failed (an attempt failed; retried at
-- next_attempt_at), delivered (answered 2xx), dead (given up: its retry
-- window passed, or the endpoint answered 410). retry_from starts the
-- retry window (creation, or a redelivery by hand).
CREATE TABLE webhook_deliveries (
    id              text PRIMARY KEY,
    endpoint_id     text NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    workflow_id     text NOT NULL,
    event_seq       bigint NOT NULL,
    event           text NOT NULL,
    payload         jsonb NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'failed', 'delivered', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    retry_from      timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- '-infinity': due at once, whatever the clock of the process that looks.
    next_attempt_at timestamptz NOT NULL DEFAULT '-infinity',
    lease_owner     text,
    lease_token     text,
    lease_until     timestamptz,
    last_status     integer,
    last_error      text NOT NULL DEFAULT '',
    delivered_at    timestamptz,
    UNIQUE (endpoint_id, workflow_id, event_seq)
);
-- What a claim looks at: the undelivered, by when they are due; and a
-- delivery's predecessors in its run.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE status IN ('pending', 'failed');
CREATE INDEX webhook_deliveries_undelivered_by_run ON webhook_deliveries (endpoint_id, workflow_id, event_seq)
    WHERE status IN ('pending', 'failed');
CREATE INDEX webhook_deliveries_by_run ON webhook_deliveries (workflow_id, event_seq);
CREATE INDEX webhook_deliveries_settled ON webhook_deliveries (created_at)
    WHERE status IN ('delivered', 'dead');

-- Every attempt, as it starts (the claim writes it) and as it ends (the
-- settle): an attempt whose process died is ended by the claim that takes
-- its delivery over ('abandoned: its lease expired').
CREATE TABLE webhook_attempts (
    delivery_id text NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    owner       text NOT NULL,
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    status_code integer,
    duration_ms double precision,
    error       text NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, attempt)
);

-- +goose StatementBegin
-- The webhook events a run event is, most specific first (an endpoint that
-- hears several of them gets one delivery, of the first it hears):
--   escalated          run.escalated (spend.cap_reached first when a spend cap escalated it)
--   awaiting_approval  approval.waiting
--   approval_reminder  approval.reminder   (deadlines on approvals, issue 44)
--   approval_timed_out approval.timed_out
--   escalation_reminder  escalation.reminder   (deadlines on escalations)
--   escalation_timed_out escalation.timed_out
--   run_finished       run.finished (spend.cap_reached first when a spend cap ended it)
--   quota_wait         spend.cap_reached, when the run waits for its account's
--                      spend cap to reset (not for turns in flight to settle)
-- A later migration that adds a kind of run event replaces this function.
CREATE FUNCTION agentsaga_webhook_events(p_kind text, p_data jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_text text := coalesce(p_data ->> 'detail', '') || ' ' || coalesce(p_data ->> 'reason', '');
    v_cap  boolean := v_text LIKE '%spend cap of account%';
BEGIN
    RETURN CASE p_kind
        WHEN 'escalated' THEN CASE WHEN v_cap THEN ARRAY['spend.cap_reached', 'run.escalated'] ELSE ARRAY['run.escalated'] END
        WHEN 'awaiting_approval' THEN ARRAY['approval.waiting']
        WHEN 'approval_reminder' THEN ARRAY['approval.reminder']
        WHEN 'approval_timed_out' THEN ARRAY['approval.timed_out']
        WHEN 'escalation_reminder' THEN ARRAY['escalation.reminder']
        WHEN 'escalation_timed_out' THEN ARRAY['escalation.timed_out']
        WHEN 'run_finished' THEN CASE WHEN v_cap THEN ARRAY['spend.cap_reached', 'run.finished'] ELSE ARRAY['run.finished'] END
        WHEN 'quota_wait' THEN CASE WHEN v_text LIKE '%waiting for the spend cap of account % to reset%'
            THEN ARRAY['spend.cap_reached'] ELSE ARRAY[]::text[] END
        ELSE ARRAY[]::text[] END;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Turns a stored run event into the deliveries of the endpoints that hear
-- it, in the statement that stored it, and wakes the deliverers (channel
-- agentsaga_webhooks). With no endpoint it reads one empty index.
CREATE FUNCTION agentsaga_webhook_outbox() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_events  text[];
    v_account text;
    v_added   bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL) THEN
        RETURN NULL;
    END IF;
    v_events := agentsaga_webhook_events(NEW.kind, NEW.data);
    IF cardinality(v_events) = 0 THEN
        RETURN NULL;
    END IF;
    v_account := coalesce((SELECT account FROM runs WHERE workflow_id = NEW.workflow_id), '');
    INSERT INTO webhook_deliveries (id, endpoint_id, workflow_id, event_seq, event, payload)
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), e.id, NEW.workflow_id, NEW.seq, t.event,
        jsonb_build_object('type', t.event, 'timestamp', NEW.at, 'run', NEW.workflow_id, 'account', v_account,
            'kind', NEW.kind, 'seq', NEW.seq, 'call_key', NEW.call_key, 'data', NEW.data)
    FROM webhook_endpoints e
    CROSS JOIN LATERAL (
        SELECT u.event FROM unnest(v_events) WITH ORDINALITY AS u(event, ord)
        WHERE u.event = ANY (e.events) ORDER BY u.ord LIMIT 1
    ) t
    WHERE e.disabled_at IS NULL
      AND (e.account = '' OR v_account = e.account OR starts_with(v_account, e.account || '/'))
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_added = ROW_COUNT;
    IF v_added > 0 THEN
        PERFORM pg_notify('agentsaga_webhooks', '');
    END IF;
    RETURN NULL;
END $$;
-- +goose StatementEnd

-- The hot path's events (a turn's and a tool call's, and a model's text)
-- never reach the function: the trigger's WHEN is all they cost.
CREATE TRIGGER run_events_webhooks AFTER INSERT ON run_events
    FOR EACH ROW WHEN (NEW.kind NOT IN ('text_delta', 'turn_started', 'turn_finished', 'tool_started', 'tool_finished',
        'attempt_discarded', 'compensation_step'))
    EXECUTE FUNCTION agentsaga_webhook_outbox();

-- +goose Down
DROP TRIGGER run_events_webhooks ON run_events;
DROP FUNCTION agentsaga_webhook_outbox();
DROP FUNCTION agentsaga_webhook_events(text, jsonb);
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
