#!/bin/sh
# The temporal-admin-tools job of docker-compose.yml, run in the
# temporalio/admin-tools image: creates Temporal's two databases in Postgres
# and brings their schemas to the version the admin-tools image ships, which
# must match the server's. The server starts only once this exits 0.
#
# Every step is idempotent (an existing database is kept, setup-schema leaves
# a newer version alone, update-schema applies only what is missing), so the
# job runs on every `docker compose up`, and bumping both images' tags
# upgrades the schema before the new server starts.
#
# temporal-sql-tool reads the connection from SQL_PLUGIN, SQL_HOST, SQL_PORT,
# SQL_USER and SQL_PASSWORD, so the password never appears in a command line.
set -eu

: "${SQL_PLUGIN:?SQL_PLUGIN must name the temporal-sql-tool plugin (postgres12)}"
: "${SQL_HOST:?SQL_HOST must name the Postgres host}"
: "${SQL_USER:?SQL_USER must name a Postgres user that may create databases}"

# The same variables, with the same defaults, name the databases for the
# temporalio/server image.
db=${DBNAME:-temporal}
visibility_db=${VISIBILITY_DBNAME:-temporal_visibility}
schema_dir=${TEMPORAL_SCHEMA_DIR:-/etc/temporal/schema/postgresql/v12}

# setup creates database $1 and updates it from the versioned schema in $2.
setup() {
	echo "setup-schema: database $1 from $2"
	temporal-sql-tool --db "$1" create
	temporal-sql-tool --db "$1" setup-schema -v 0.0
	temporal-sql-tool --db "$1" update-schema -d "$2"
}

setup "$db" "$schema_dir/temporal/versioned"
setup "$visibility_db" "$schema_dir/visibility/versioned"
echo "setup-schema: done"
