package bench_test

// The tests' side of the harness: the package's dev server, a database of
// a test's own, the agentsaga binary for the scenarios with worker
// processes, and runners that run a scenario within a bound and log its
// table.

import (
	"context"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/internal/testbinary"
	"github.com/agentsaga/agentsaga/worker"
)

var temporalClient client.Client

func TestMain(m *testing.M) {
	testbinary.Main(m, func(server *testsuite.DevServer) { temporalClient = server.Client() })
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

// buildAgentsaga returns the agentsaga binary the scenarios' worker
// processes run, built once for the test binary (testbinary.Agentsaga).
func buildAgentsaga(t *testing.T) string {
	t.Helper()
	return testbinary.Agentsaga(t)
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
