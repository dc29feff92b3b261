#!/bin/sh
# The temporal-create-namespace job of docker-compose.yml, run in the
# temporalio/admin-tools image once the server is up: creates the namespace
# the worker polls and registers agentsaga's search attributes in it (the
# ones `agentsaga dev` registers; workflows.SearchAttributes lists them and
# cmd/agentsaga/compose_test.go checks this script against it). The worker
# starts only once this exits 0.
#
# Every step is idempotent (an existing namespace is kept, attributes already
# there are left alone), so the job runs on every `docker compose up`. Each
# step is retried: the frontend's port opens before it serves every call.
set -eu

: "${TEMPORAL_ADDRESS:?TEMPORAL_ADDRESS must name the Temporal frontend (host:port)}"
: "${TEMPORAL_NAMESPACE:?TEMPORAL_NAMESPACE must name the namespace to create}"
retention=${TEMPORAL_NAMESPACE_RETENTION:-72h}
attempts=${SETUP_ATTEMPTS:-30}
pause=${SETUP_RETRY_SECONDS:-2}

# retry runs its arguments until they succeed, $attempts times at most.
retry() {
	n=1
	until "$@"; do
		if [ "$n" -ge "$attempts" ]; then
			echo "create-namespace: gave up after $n attempts: $*" >&2
			return 1
		fi
		n=$((n + 1))
		sleep "$pause"
	done
}

ensure_namespace() {
	if temporal operator namespace describe --address "$TEMPORAL_ADDRESS" \
		--namespace "$TEMPORAL_NAMESPACE" >/dev/null 2>&1; then
		echo "create-namespace: namespace $TEMPORAL_NAMESPACE exists"
		return 0
	fi
	temporal operator namespace create --address "$TEMPORAL_ADDRESS" \
		--namespace "$TEMPORAL_NAMESPACE" --retention "$retention"
}

retry temporal operator cluster health --address "$TEMPORAL_ADDRESS"
retry ensure_namespace
retry temporal operator search-attribute create --address "$TEMPORAL_ADDRESS" \
	--namespace "$TEMPORAL_NAMESPACE" \
	--name AgentStatus --type Keyword \
	--name StepsUsed --type Int \
	--name LeafCalls --type Int \
	--name USDSpent --type Double \
	--name Amplification --type Double \
	--name AgentForkedFrom --type Keyword
echo "create-namespace: done"
