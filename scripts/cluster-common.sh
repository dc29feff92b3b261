#!/usr/bin/env bash
# Sourced by scripts/test-cluster.sh and scripts/soak.sh: what both need of
# the real Temporal server before their tests start it.
#
#  1. Builds bin/temporal-server and bin/temporal-sql-tool from
#     go.temporal.io/server@$TEMPORAL_SERVER_VERSION, only when missing (about
#     8 minutes on 2 cores, from nothing).
#  2. Creates Temporal's two databases afresh in the Postgres DATABASE_URL
#     names (its host, port, user and password; the databases are
#     $TEMPORAL_DB and $TEMPORAL_VISIBILITY_DB) with
#     deploy/temporal/setup-schema.sh, the script compose's schema job runs,
#     and the schema the server's module ships. AGENTSAGA_CLUSTER_KEEP_DB=1
#     keeps databases that exist.
#
# It leaves root, GO, port, db, visibility_db, work, host, pg_port, user and
# password set, and cluster_env: the environment a test needs to start the
# server (TestCluster's and TestSoak's startTemporalServer).
# cluster_script: what the messages say they come from.
cluster_script=${cluster_script:-cluster}

cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}
version=${TEMPORAL_SERVER_VERSION:-v1.29.1}
port=${TEMPORAL_CLUSTER_PORT:-7333}
db=${TEMPORAL_DB:-temporal_cluster}
visibility_db=${TEMPORAL_VISIBILITY_DB:-temporal_cluster_visibility}
work=$root/bin/.cluster
mkdir -p "$work"

# 1. The server and its sql tool.
if [ ! -x bin/temporal-server ] || [ ! -x bin/temporal-sql-tool ]; then
	echo "$cluster_script: building go.temporal.io/server $version (cmd/server, cmd/tools/sql) into bin/"
	began=$(date +%s)
	GOBIN=$work GOFLAGS= nice -n 19 "$GO" install \
		"go.temporal.io/server/cmd/server@$version" "go.temporal.io/server/cmd/tools/sql@$version"
	mv "$work/server" bin/temporal-server
	mv "$work/sql" bin/temporal-sql-tool
	echo "$cluster_script: built in $(($(date +%s) - began)) s"
fi
schema=$(GOFLAGS= "$GO" mod download -json "go.temporal.io/server@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')/schema/postgresql/v12
[ -d "$schema" ] || { echo "$cluster_script: no Postgres schema at $schema" >&2; exit 1; }

# 2. The databases. DATABASE_URL is the ledger's; Temporal's databases live
# beside it, on the same server and as the same user.
url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/agentsaga?sslmode=disable}
rest=${url#*://}
creds=postgres
if [[ $rest == *@* ]]; then creds=${rest%%@*}; rest=${rest#*@}; fi
hostport=${rest%%/*}
host=${hostport%%:*}; pg_port=${hostport##*:}; [ "$pg_port" = "$hostport" ] && pg_port=5432
user=${creds%%:*}; password=""
[[ $creds == *:* ]] && password=${creds#*:}
export SQL_PLUGIN=postgres12 SQL_HOST=$host SQL_PORT=$pg_port SQL_USER=$user SQL_PASSWORD=$password
if [ -z "${AGENTSAGA_CLUSTER_KEEP_DB:-}" ]; then
	for name in "$db" "$visibility_db"; do
		PGPASSWORD=$password psql -q -X -h "$host" -p "$pg_port" -U "$user" -d postgres \
			-c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" >/dev/null
	done
fi
PATH=$root/bin:$PATH DBNAME=$db VISIBILITY_DBNAME=$visibility_db TEMPORAL_SCHEMA_DIR=$schema \
	sh deploy/temporal/setup-schema.sh > "$work/setup-schema.log" 2>&1 ||
	{ cat "$work/setup-schema.log" >&2; exit 1; }
echo "$cluster_script: schemas set up in $db and $visibility_db on $host:$pg_port ($(tail -n 1 "$work/setup-schema.log"))"

cluster_env=(AGENTSAGA_CLUSTER_SERVER="$root/bin/temporal-server" AGENTSAGA_CLUSTER_ROOT="$root" AGENTSAGA_CLUSTER_PORT="$port"
	POSTGRES_SEEDS="$host" DB_PORT="$pg_port" POSTGRES_USER="$user" POSTGRES_PWD="$password"
	DBNAME="$db" VISIBILITY_DBNAME="$visibility_db")

# cluster_result ends the script as its test did: on a failure, the lines
# of log that say why (and those matching the extra pattern), and its exit
# status; otherwise "$cluster_script: ok" and what follows.
cluster_result() {
	local status=$1 log=$2 pattern=$3 ok=$4
	if [ "$status" -ne 0 ]; then
		echo
		echo "$cluster_script: FAILED (exit $status); the failures:"
		grep -E -- "--- FAIL|Error Trace|Error:|panic|$pattern" "$log" | head -n 60 || true
		exit "$status"
	fi
	echo "$cluster_script: ok$ok"
}
