-- +goose Up

-- One row per agent run, keyed by its Temporal workflow ID. The workflow
-- writes it through activities at start and finish, so the ledger can answer
-- "what happened" without a live worker or Temporal.
CREATE TABLE runs (
    workflow_id        text PRIMARY KEY,
    run_id             text NOT NULL,
    parent_workflow_id text,
    goal               text NOT NULL,
    spec               jsonb NOT NULL,
    status             text NOT NULL DEFAULT 'running'
        CHECK (status IN ('running', 'completed', 'partial', 'escalated', 'compensated', 'needs-attention', 'failed')),
    answer             text NOT NULL DEFAULT '',
    handoff_note       text NOT NULL DEFAULT '',
    reason             text NOT NULL DEFAULT '',
    steps_used         integer NOT NULL DEFAULT 0,
    leaf_calls         integer NOT NULL DEFAULT 0,
    tokens_used        bigint NOT NULL DEFAULT 0,
    started_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at        timestamptz
);

-- Everything a run does to the outside world, one row per idempotency key
-- (workflow ID + "/" + activity ID). Stripe semantics: the first completed
-- result is stored and returned to every later attempt; a different request
-- under the same key is a conflict; a started row whose lease has not run
-- out is an in-flight duplicate.
CREATE TABLE actions (
    id                  bigserial PRIMARY KEY,
    idempotency_key     text NOT NULL UNIQUE,
    workflow_id         text NOT NULL,
    activity_id         text NOT NULL,
    tool                text NOT NULL,
    request_fingerprint text NOT NULL,
    arguments           text NOT NULL,
    status              text NOT NULL
        CHECK (status IN ('started', 'completed', 'failed', 'rejected')),
    result              text,
    error               text NOT NULL DEFAULT '',
    attempts            integer NOT NULL DEFAULT 1,
    locked_until        timestamptz,
    -- The compensating action registered for this forward action, if any.
    compensation_id     bigint REFERENCES actions (id),
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at        timestamptz
);
CREATE INDEX actions_by_workflow ON actions (workflow_id, id);

-- One row per attempt that left the process: every model call and every tool
-- execution, including those that failed. Leaf calls divided by logical calls
-- is the amplification the retry budget bounds.
CREATE TABLE leaf_calls (
    id              bigserial PRIMARY KEY,
    workflow_id     text NOT NULL,
    activity_id     text NOT NULL,
    idempotency_key text NOT NULL,
    attempt         integer NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('model', 'tool', 'compensation')),
    target          text NOT NULL,
    outcome         text NOT NULL DEFAULT 'in-flight' CHECK (outcome IN ('in-flight', 'ok', 'error')),
    error           text NOT NULL DEFAULT '',
    started_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at     timestamptz
);
CREATE INDEX leaf_calls_by_workflow ON leaf_calls (workflow_id, id);

-- The fleet-wide retry token bucket. Every worker withdraws from and
-- deposits into the same row; refill is computed in SQL from
-- clock_timestamp() so that no worker's clock matters.
CREATE TABLE retry_buckets (
    name              text PRIMARY KEY,
    capacity          double precision NOT NULL CHECK (capacity > 0),
    refill_per_second double precision NOT NULL CHECK (refill_per_second >= 0),
    success_bonus     double precision NOT NULL DEFAULT 0 CHECK (success_bonus >= 0),
    tokens            double precision NOT NULL CHECK (tokens >= 0),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (tokens <= capacity)
);

-- One circuit breaker per dependency, shared by the fleet.
CREATE TABLE circuit_breakers (
    dependency        text PRIMARY KEY,
    state             text NOT NULL DEFAULT 'closed' CHECK (state IN ('closed', 'open', 'half-open')),
    failures          integer NOT NULL DEFAULT 0,
    window_started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    opened_at         timestamptz,
    probe_in_flight   boolean NOT NULL DEFAULT false,
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- +goose Down
DROP TABLE circuit_breakers;
DROP TABLE retry_buckets;
DROP TABLE leaf_calls;
DROP TABLE actions;
DROP TABLE runs;
