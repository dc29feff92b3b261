#!/usr/bin/env bash
# `make test`'s tests, in two phases (issue 46 item 4).
#
# Phase 1 runs at once, each line of output prefixed with its part: the
# library's packages, the k8s manifests' test, the CLI module's
# benchmarks' smoke tests and HTTP API, and cmd/agentsaga's tests but its
# chaos harness and fault tests (the CLI's tail: in-process CLI tests,
# the deploy and eval tests, replays). They mostly wait (on outages,
# timers and dev servers, each test on a database of its own), so the
# library runs 4 packages at a time (-p 4) and 4 tests of each at a time
# (-parallel 4) rather than one per core, with its worker package as a
# part of its own.
#
# Phase 2 is cmd/agentsaga's chaos harness and fault tests, alone: they
# run real worker processes with 3 s heartbeat timeouts and the harness
# checks that a takeover comes within the heartbeat timeout plus 5 s (I5),
# and on a 2-core machine the other packages' load once pushed one past
# it.
#
# The benchmarks' smoke tests and cmd/agentsaga run without -race: what
# they exercise is the engine's code, which the library's own tests run
# under -race, driven in-process or in processes of the agentsaga binary
# (built without it), and the detector's CPU is taken from the library's
# tests beside them on a 2-core machine. It saved less than hoped (404 s
# to 367 s beside the library), as most of them run one after another:
# run in parallel (t.Parallel), their worker processes and dev servers
# pushed the library's timed tests past their bounds at load 16-20.
# The HTTP API keeps -race: its streams are concurrent code of the CLI's
# own.
#
# Everything builds with -trimpath (GOFLAGS, so the agentsaga binaries the
# tests build too): without it Go's build cache keys each package by its
# directory, and a clean clone in a new directory compiled everything
# again, 3-4 minutes of a clean clone's run.
#
# GO, MAKE and TEST_FLAGS come from the Makefile. The script stops after the
# first phase that fails, and exits non-zero naming the parts that failed.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"
read -r -a flags <<<"${TEST_FLAGS:--race -timeout 20m}"
unraced=()
for f in "${flags[@]}"; do
	[[ $f == -race ]] || unraced+=("$f")
done

pids=()
names=()
logs=$(mktemp -d)
# start runs "$@" in the background as part $1, its lines prefixed and
# kept in $logs/$1 for finish's summary.
start() {
	local name=$1
	shift
	(
		set -o pipefail
		"$@" 2>&1 | sed -u "s/^/[$name] /" | tee "$logs/$name"
	) &
	pids+=("$!")
	names+=("$name")
}
# finish waits for every part started and fails naming those that failed,
# and the tests in them that failed: the SDK's workers log to stderr, and
# a failing test's own lines can end up thousands of lines above the end,
# beyond what a CI log's tail keeps.
finish() {
	local failed=()
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed+=("${names[$i]}")
	done
	pids=()
	names=()
	if ((${#failed[@]} > 0)); then
		for name in "${failed[@]}"; do
			echo "make test: what failed in $name:" >&2
			grep -E -A12 -- '--- FAIL|^\[[a-z-]+\] (panic:|fatal error:)|Error Trace:|test timed out' "$logs/$name" |
				grep -v -E 'Activity error|ExecuteActivity|Stopped Worker|Started Worker' | head -80 >&2
		done
		echo "make test: failed: ${failed[*]}" >&2
		exit 1
	fi
}

# The tests that hold a worker takeover to the heartbeat timeout plus 5 s
# (I5): phase 2 runs them alone.
takeover_tests='^(TestChaos|TestFaults)$'

began=$SECONDS
# The agentsaga binary that the CLI module's process tests run as workers,
# built once here for its three test binaries (testbinary.BinaryEnv):
# each linked its own, and phase 1 keeps both cores busy throughout.
bindir=$(mktemp -d)
trap 'rm -rf "$bindir" "$logs"' EXIT
if ! "$GO" -C cmd/agentsaga build -ldflags='-s -w' -o "$bindir/agentsaga" .; then
	echo "make test: failed: go build ./cmd/agentsaga (the binary the process tests run)" >&2
	exit 1
fi
export AGENTSAGA_TEST_BINARY=$bindir/agentsaga
echo "make test: built the agentsaga binary for the process tests in $((SECONDS - began)) s"
# worker (110-120 s of tests that mostly wait on outages and timers) runs
# as a part of its own, from the start: under ./... it is among the last
# packages go test starts (after 140-190 s of phase 1), and phase 1 ended
# with it.
worker_pkg=github.com/agentsaga/agentsaga/worker
if ! library_pkgs=$("$GO" list ./...) || ! grep -qx "$worker_pkg" <<<"$library_pkgs"; then
	echo "make test: failed: go list ./... (the library's packages, $worker_pkg among them)" >&2
	exit 1
fi
mapfile -t library_pkgs < <(grep -vx "$worker_pkg" <<<"$library_pkgs")
start library "$GO" test "${flags[@]}" -p 4 -parallel 4 "${library_pkgs[@]}"
start library-worker "$GO" test "${flags[@]}" -parallel 4 ./worker
start k8s "$GO" -C deploy/k8s test ./...
start cli-api "$GO" -C cmd/agentsaga test "${flags[@]}" ./api/...
start cli-bench "$GO" -C cmd/agentsaga test "${unraced[@]}" -parallel 4 ./bench/...
# cmd/agentsaga's other tests (the CLI in-process, deploy, eval, replay)
# check no takeover bound: they run here. Its browser tests wait for
# Chromium, which installs first on a fresh machine.
start cli-tail sh -c '"${MAKE:-make}" --no-print-directory chromium && exec "$@"' sh \
	"$GO" -C cmd/agentsaga test "${unraced[@]}" -skip "$takeover_tests" .
finish
echo "make test: phase 1 (library, k8s, API, benchmarks, the CLI's tail) took $((SECONDS - began)) s"

phase2=$SECONDS
start cli "$GO" -C cmd/agentsaga test "${unraced[@]}" -run "$takeover_tests" .
finish
echo "make test: phase 2 (cmd/agentsaga's chaos and fault tests) took $((SECONDS - phase2)) s; $((SECONDS - began)) s in all"
