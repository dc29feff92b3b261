# The two commands that matter: `make demo` and `make test`. Each does its own
# set-up on a fresh machine: it builds bin/temporal from the Go module proxy,
# starts (or installs) Postgres and creates the database.

GO ?= go
TEMPORAL_CLI_VERSION := v1.5.1
export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/agentsaga?sslmode=disable
# `make demo DEMO_FLAGS=` keeps the stack and its UI up after the run.
DEMO_FLAGS ?= --exit
TEST_FLAGS ?= -race -timeout 20m

.PHONY: build demo dev test postgres migrate vet clean bench

build:
	$(GO) build -o bin/agentsaga ./cmd/agentsaga

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

test: bin/temporal postgres
	$(GO) test $(TEST_FLAGS) ./...

vet:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...

clean:
	rm -rf bin .dev

# Benchmarks print their own figures; they are not part of `make test`.
bench: postgres
	$(GO) test -run '^$$' -bench . -benchmem ./budget/ ./ledger/
