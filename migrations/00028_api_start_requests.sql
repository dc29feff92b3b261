-- +goose Up

-- POST /v1/runs honours an Idempotency-Key header (issue 33): the same key
-- and the same request start one run, however many times it is sent and to
-- whichever API process. A row binds a key, per API key (principal: its
-- name), to the request it came with (a SHA-256 of it) and to the workflow
-- ID chosen for it, before the run is started; a retry finds the row and
-- answers with that run, and a different request under the same key is
-- refused. A row older than a day no longer binds its key (the claim
-- statement takes it over), as Stripe's keys do.
CREATE TABLE api_start_requests (
    principal       text        NOT NULL,
    idempotency_key text        NOT NULL,
    request_hash    bytea       NOT NULL,
    workflow_id     text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, idempotency_key)
);

-- +goose Down
DROP TABLE api_start_requests;
