package bench_test

// The tests' side of the harness: the package's dev server, a database of
// a test's own, the agentsaga binary for the scenarios with worker
// processes, and runners that run a scenario within a bound and log its
// table.

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/worker"
)

var temporalClient client.Client

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

// runTests does what agentsagatest.Main does (the package's dev server
// around the tests), and removes the shared binary (builtBinary) before
// the test binary exits, which Main's own exit would not let it do.
func runTests(m *testing.M) int {
	options, err := agentsagatest.DevServerOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	server, err := testsuite.StartDevServer(context.Background(), options)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the dev server from %s: %v\n", options.ExistingPath, err)
		return 1
	}
	defer func() { _ = server.Stop() }()
	temporalClient = server.Client()
	defer builtBinary.remove()
	return m.Run()
}

// pooledDatabase is a migrated database of the test's own whose URL bounds
// the pools opened on it to 8 connections (pool_max_conns), as the
// library's tests do, so that a benchmark's several workers, each with its
// pool, hold a share of Postgres that parallel packages leave room for.
func pooledDatabase(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(agentsagatest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "8")
	u.RawQuery = q.Encode()
	return u.String()
}

// builtBinary is the agentsaga binary the scenarios' worker processes run,
// built once for all the tests: each build was a link of the whole binary,
// a minute or more beside the library's tests on 2 cores, and six tests
// built it in turn.
var builtBinary sharedBinary

// sharedBinary is a binary built once, on first use, into a directory of
// its own that remove deletes.
type sharedBinary struct {
	mu   sync.Mutex
	dir  string
	path string
	err  error
}

func (b *sharedBinary) remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// buildAgentsaga returns the agentsaga binary the worker processes run,
// built without -race (the worker processes are measured, not the test),
// within ten minutes of its own rather than the scenario's: on a fresh
// clone beside the other packages on 2 cores a build was once killed at
// two minutes. The first test to ask builds it; the others wait for it.
func buildAgentsaga(t *testing.T) string {
	t.Helper()
	b := &builtBinary
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.path == "" && b.err == nil {
		b.path, b.err = b.build()
	}
	require.NoError(t, b.err)
	return b.path
}

func (b *sharedBinary) build() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the tests build the agentsaga binary and need the go tool on PATH: %w", err)
	}
	if b.dir, err = os.MkdirTemp("", "agentsaga-bench-bin-"); err != nil {
		return "", err
	}
	bin := filepath.Join(b.dir, "agentsaga")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-ldflags=-s -w", "-o", bin, "github.com/agentsaga/agentsaga/cmd/agentsaga").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/agentsaga: %w: %s", err, out)
	}
	return bin, nil
}

// processBench is what a scenario with worker processes of its own needs:
// the dev server's binary, the agentsaga binary built for the workers,
// and the database; the test is skipped with -short.
func processBench(t *testing.T) (temporalBin, executable, databaseURL string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the agentsaga binary and runs worker processes")
	}
	options, err := agentsagatest.DevServerOptions()
	require.NoError(t, err)
	return options.ExistingPath, buildAgentsaga(t), worker.ConfigFromEnv().DatabaseURL
}

// runScenario runs a scenario within three minutes and logs its table.
func runScenario[C, R any](t *testing.T, scenario func(context.Context, C) (R, error), cfg C, print func(io.Writer, R)) R {
	t.Helper()
	return runScenarioWithin(t, 3*time.Minute, scenario, cfg, print)
}

// runScenarioWithin is runScenario within limit.
func runScenarioWithin[C, R any](t *testing.T, limit time.Duration, scenario func(context.Context, C) (R, error), cfg C, print func(io.Writer, R)) R {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	result, err := scenario(ctx, cfg)
	require.NoError(t, err)
	var table strings.Builder
	print(&table, result)
	t.Log(table.String())
	return result
}

// inProcess runs a scenario whose workers run in the test's process, on the
// package's dev server and a database of the test's own, within three
// minutes, and logs its table.
func inProcess[C, R any](t *testing.T, scenario func(context.Context, client.Client, string, C) (R, error), cfg C, print func(io.Writer, R)) R {
	t.Helper()
	return runScenario(t, func(ctx context.Context, cfg C) (R, error) {
		return scenario(ctx, temporalClient, pooledDatabase(t), cfg)
	}, cfg, print)
}
