#!/usr/bin/env bash
# make test-cluster: agentsaga on a real Temporal server, the one the
# temporalio/server image runs, built here from Go modules (the version
# compose pins), on Postgres, all services in one process.
#
# Steps 1 and 2 are scripts/cluster-common.sh's, shared with `make soak`.
#
#  1. Builds bin/temporal-server and bin/temporal-sql-tool from
#     go.temporal.io/server@$TEMPORAL_SERVER_VERSION, only when missing (about
#     8 minutes on 2 cores, from nothing).
#  2. Creates Temporal's two databases afresh in the Postgres DATABASE_URL
#     names (its host, port, user and password; the databases are
#     $TEMPORAL_DB and $TEMPORAL_VISIBILITY_DB, temporal_cluster and
#     temporal_cluster_visibility by default) with deploy/temporal/setup-schema.sh,
#     the script compose's schema job runs, and the schema the server's module
#     ships. AGENTSAGA_CLUSTER_KEEP_DB=1 keeps databases that exist.
#  3. Runs TestCluster (cmd/agentsaga/cluster_test.go), which starts the
#     server with deploy/temporal/config.yaml and deploy/temporal/dynamicconfig.yaml
#     on port $TEMPORAL_CLUSTER_PORT (7333) and the ports after it, and
#     prints its report: invariant violations (0 required) and takeover times
#     with the tuned and the default keepalive.
set -euo pipefail

cluster_script=test-cluster
# shellcheck source=scripts/cluster-common.sh
source "$(dirname "$0")/cluster-common.sh"

# 3. The tests. The config file reads the same variables as the
# temporalio/server image (deploy/temporal/config.yaml).
report=$work/report.txt
log=$work/test.log
rm -f "$report"
echo "test-cluster: running TestCluster on a temporal-server at 127.0.0.1:$port (log: $log)"
status=0
env "${cluster_env[@]}" AGENTSAGA_CLUSTER_REPORT="$report" \
	nice -n 19 "$GO" -C "$root/cmd/agentsaga" test -race -count=1 -timeout 90m -v -run '^TestCluster$' . > "$log" 2>&1 || status=$?
grep -E '^\s*--- (FAIL|PASS|SKIP): TestCluster(/[^/]*)? ' "$log" || true
if [ -f "$report" ]; then
	echo
	cat "$report"
fi
# The server restarts and the deploy log their own figures.
grep -hoE '(faults_test|deploy_test)\.go:[0-9]+: (runs=1 completed=1 temporal restarts|deploy A -> B).*' "$log" || true
cluster_result "$status" "$log" invariant ""
