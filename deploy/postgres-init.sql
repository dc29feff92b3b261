-- Run once by the postgres image on an empty data directory
-- (mounted into /docker-entrypoint-initdb.d/ by docker-compose.yml).
-- The temporal-admin-tools job creates Temporal's own databases (temporal,
-- temporal_visibility); this one belongs to the agentsaga worker, which
-- applies its own migrations to it at start.
CREATE DATABASE agentsaga;
