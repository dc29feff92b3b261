-- +goose Up

-- API keys for `agentsaga serve` (issue 33): a key is shown once, when it
-- is made, and kept only as its SHA-256 (a key is 32 random bytes, so a
-- fast hash is enough: nothing short to guess). A key bound to an account
-- sees that account's runs and its sub-accounts' (accounts nest by path);
-- one bound to none sees every run. Revoked keys stay, for the record.
CREATE TABLE api_keys (
    id           bigserial PRIMARY KEY,
    name         text NOT NULL CHECK (name <> ''),
    hash         bytea NOT NULL UNIQUE,
    scopes       text[] NOT NULL CHECK (cardinality(scopes) > 0),
    account      text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE UNIQUE INDEX api_keys_live_name ON api_keys (name) WHERE revoked_at IS NULL;

-- +goose Down
DROP TABLE api_keys;
