#!/usr/bin/env bash
# make soak: TestSoak (cmd/agentsaga/soak_test.go) for $SOAK_DURATION (2h by
# default) on the real Temporal server `make test-cluster` builds, set up
# the same way (scripts/cluster-common.sh: the build when missing, then
# Temporal's databases afresh), under names of its own so that it does not
# meet a test-cluster run: databases temporal_soak and
# temporal_soak_visibility, port 7433. A worker is killed every
# $SOAK_KILL_EVERY (3m); the ledger's Postgres (the soak's own) restarts
# half-way. The figures are printed and written to $SOAK_OUT
# (cmd/agentsaga/bench/results/soak.json).
set -euo pipefail

export TEMPORAL_DB=${TEMPORAL_DB:-temporal_soak}
export TEMPORAL_VISIBILITY_DB=${TEMPORAL_VISIBILITY_DB:-temporal_soak_visibility}
export TEMPORAL_CLUSTER_PORT=${TEMPORAL_CLUSTER_PORT:-7433}
cluster_script=soak
# shellcheck source=scripts/cluster-common.sh
source "$(dirname "$0")/cluster-common.sh"

duration=${SOAK_DURATION:-2h}
kill_every=${SOAK_KILL_EVERY:-3m}
out=${SOAK_OUT:-$root/cmd/agentsaga/bench/results/soak.json}
log=$work/soak.log
# The test's own limit, past the duration, the set-up and the last runs'
# checks: raise it with a longer SOAK_DURATION.
timeout=${SOAK_TIMEOUT:-4h}
echo "soak: TestSoak for $duration (a worker killed every $kill_every) on a temporal-server at 127.0.0.1:$port (log: $log)"
status=0
env "${cluster_env[@]}" SOAK_DURATION="$duration" SOAK_KILL_EVERY="$kill_every" SOAK_OUT="$out" \
	nice -n 10 "$GO" -C "$root/cmd/agentsaga" test -count=1 -timeout "$timeout" -v -run '^TestSoak$' . > "$log" 2>&1 || status=$?
# The report: everything TestSoak printed from its table on.
sed -n '/^soak on /,/^}$/p' "$log"
cluster_result "$status" "$log" 'soak_test.go:[0-9]+: .*(I[0-9]:|could not|stream|memory)' " ($out)"
