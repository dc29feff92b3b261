-- Run once by the postgres image on an empty data directory
-- (mounted into /docker-entrypoint-initdb.d/ by docker-compose.yml).
-- Temporal's auto-setup creates its own databases (temporal,
-- temporal_visibility); this one belongs to the agentsaga worker, which
-- applies its own migrations to it at start.
CREATE DATABASE agentsaga;
