# The two commands that matter: `make demo` and `make test`. Each does its own
# set-up on a fresh machine: it builds bin/temporal from the Go module proxy,
# starts (or installs) Postgres and creates the database.

GO ?= go
TEMPORAL_CLI_VERSION := v1.5.1
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/agentsaga?sslmode=disable
# `make demo DEMO_FLAGS=` keeps the stack and its UI up after the run.
DEMO_FLAGS ?= --exit
TEST_FLAGS ?= -race -timeout 20m

.PHONY: build demo dev test postgres migrate vet clean bench chromium fuzz chaos record-histories surface

build:
	$(GO) -C cmd/agentsaga build -o $(CURDIR)/bin/agentsaga .

bin/temporal:
	GOBIN=$(CURDIR)/bin GOFLAGS= $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

postgres:
	@scripts/ensure-postgres.sh

demo: bin/temporal postgres build
	./bin/agentsaga demo $(DEMO_FLAGS)

dev: bin/temporal postgres build
	./bin/agentsaga dev

migrate: postgres build
	./bin/agentsaga migrate

# Debian's Chromium, for the browser test of the Temporal UI; without it
# (no apt-get, or not root) that test skips itself. `make test` installs it
# beside its first phase (scripts/test.sh).
chromium:
	@test -x /usr/bin/chromium || { command -v apt-get >/dev/null 2>&1 && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || \
		echo "make chromium: could not install Debian's chromium (apt-get missing or failed); the UI test will be skipped"

# The CLI and the benchmarks are a module of their own (cmd/agentsaga), so
# the library's go.mod carries only the library; each module is tested by a
# `go test` of its own. scripts/test.sh runs them in two phases: the
# library, the k8s manifests, the CLI's benchmarks and API and the rest of
# cmd/agentsaga at once, then cmd/agentsaga's chaos harness and fault tests
# alone (they time takeovers of real worker processes); the benchmarks and
# cmd/agentsaga without -race (the script says why).
test: bin/temporal postgres
	@GO="$(GO)" MAKE="$(MAKE)" TEST_FLAGS="$(TEST_FLAGS)" scripts/test.sh

# Every fuzz target, FUZZTIME each (`make fuzz FUZZTIME=10m`). `make test`
# runs the same targets on their seed corpora (testdata/fuzz) only. What a
# run finds is written to testdata/fuzz/<target>/: fix it and commit it.
FUZZTIME ?= 1m
FUZZ_TARGETS := \
	./budget:FuzzRetryableStatus ./internal/refusal:FuzzRefusalRules ./internal/refusal:FuzzRefusalIntegerRendering \
	./activities:FuzzOpenAITurn ./activities:FuzzAnthropicTurn ./activities:FuzzNewHTTPError \
	./internal/activityid:FuzzCompensation ./internal/compensation:FuzzResolve ./internal/ledgerdb:FuzzFingerprint \
	./workflows:FuzzParseSpec ./workflows:FuzzIdempotencyKeys ./internal/quota:FuzzParse ./internal/argrule:FuzzEvaluate \
	./internal/ledgerdb:FuzzSpendCap ./budget:FuzzPriceTable ./cmd/agentsaga/api:FuzzAPIInputs \
	./workflows:FuzzForked ./internal/ledgerdb:FuzzForkRun
# A target under cmd/agentsaga is in the CLI's module: fuzzed from there.
fuzz: bin/temporal postgres
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; echo "== $$pkg $$name ($(FUZZTIME))"; \
		case $$pkg in \
		./cmd/agentsaga/*) $(GO) -C cmd/agentsaga test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) ./$${pkg#./cmd/agentsaga/};; \
		*) $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg;; \
		esac; \
	done

vet:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...

clean:
	rm -rf bin .dev

# The replay corpus (workflows/testdata/histories), recorded on a dev server.
# `make test` replays it; regenerate it only on purpose, and say why in the
# commit: it is the contract with every run in flight. `ONLY=a,b` records
# just those scenarios and leaves the rest of the corpus as it was; `SET=name`
# records into workflows/testdata/histories/name, beside the older histories.
record-histories: bin/temporal postgres
	$(GO) test -count=1 -run '^TestRecordHistories$$' ./worker -args -record-histories -record-histories.only=$(ONLY) -record-histories.set=$(SET)

# The chaos harness (cmd/agentsaga/chaos_test.go, issue 11) in its large
# configuration: every fault (kill -9, SIGSTOP/SIGCONT, Postgres restart, slow
# tool) at every boundary of a tool call, with tool timeouts of 3, 30 and 60 s,
# CHAOS_RUNS runs a cell, CHAOS_PARALLEL at once, each run charged to an
# account whose spend cap binds in most of them. It prints the table of
# invariant violations (I1-I7; I6 and I7 are the spend cap's) and saves it
# in cmd/agentsaga/bench/results/chaos.txt; it fails if any count is not 0. `make test`
# runs its small configuration.
CHAOS_RUNS ?= 2
CHAOS_PARALLEL ?= 6
chaos: bin/temporal postgres
	$(GO) -C cmd/agentsaga test -race -timeout 180m -count=1 -v -run '^TestChaos$$' . -args \
		-chaos.size=large -chaos.runs=$(CHAOS_RUNS) -chaos.parallel=$(CHAOS_PARALLEL) \
		-chaos.out=$(CURDIR)/cmd/agentsaga/bench/results/chaos.txt

# agentsaga on a real Temporal server (go.temporal.io/server v1.29.1, the
# version compose pins, built into bin/ from Go modules when missing) on
# Postgres, started with deploy/temporal's config: two workers, the chaos
# cases that matter most, a server restart, the deploy test, the search
# attributes on a fresh namespace, and takeover with the tuned and the
# default keepalive (scripts/test-cluster.sh). Not part of `make test`: it
# takes about 15 minutes on top of it, 8 more for the first build.
.PHONY: test-cluster
test-cluster: postgres
	@GO="$(GO)" scripts/test-cluster.sh

# The soak (issue 46): SOAK_DURATION (2h) of mixed runs (spend caps that
# bind, approvals answered over the API, runs followed over SSE, sub-agents)
# on the real server test-cluster builds, with a worker kill -9 every
# SOAK_KILL_EVERY (3m) and a Postgres restart half-way; every chaos
# invariant counted, and serve's and a worker's memory held to 1.1x
# (scripts/soak.sh, TestSoak). Not part of `make test`.
SOAK_DURATION ?= 2h
SOAK_KILL_EVERY ?= 3m
.PHONY: soak
soak: postgres
	@GO="$(GO)" SOAK_DURATION=$(SOAK_DURATION) SOAK_KILL_EVERY=$(SOAK_KILL_EVERY) scripts/soak.sh

# Benchmarks print their own figures; they are not part of `make test`.
# Each scenario also saves its figures as JSON under cmd/agentsaga/bench/results/.
BENCH := ./bin/agentsaga bench
bench: bin/temporal postgres build
	$(GO) test -run '^$$' -bench . -benchmem ./budget/ ./internal/ledgerdb/ | tee cmd/agentsaga/bench/results/go-bench.txt
	$(BENCH) amplification --out cmd/agentsaga/bench/results/amplification.json --chart cmd/agentsaga/bench/amplification.png
	$(BENCH) success --runs 40 --calls 10 --out cmd/agentsaga/bench/results/success.json
	$(BENCH) overhead --runs 4 --calls 50 --out cmd/agentsaga/bench/results/overhead.json
	$(BENCH) storm --out cmd/agentsaga/bench/results/storm.json --chart cmd/agentsaga/bench/storm.png
	$(BENCH) ledger --out cmd/agentsaga/bench/results/ledger.json
	$(BENCH) long --out cmd/agentsaga/bench/results/long.json --chart cmd/agentsaga/bench/long.png
	$(BENCH) fleet --out cmd/agentsaga/bench/results/fleet.json
	$(BENCH) ratelimit --out cmd/agentsaga/bench/results/ratelimit.json --chart cmd/agentsaga/bench/ratelimit.png
	$(BENCH) spend --out cmd/agentsaga/bench/results/spend.json --chart cmd/agentsaga/bench/spend.png
	$(BENCH) drain --out cmd/agentsaga/bench/results/drain.json
	$(BENCH) cache --out cmd/agentsaga/bench/results/cache.json
	$(MAKE) chaos

# The public API's size (issue 32): exported names and fields of each
# package of the library's module; internal/ is counted apart.
surface:
	$(GO) run ./internal/surface
