package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/workflows"
)

// lockedBuffer is a bytes.Buffer the worker's goroutines can log into.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// `make demo` fails calls on purpose (a 503 that is retried, a 400, a
// search whose retries the run's budget denies) and goes exactly as
// planned, so it must print no ERROR line: neither in what it prints nor
// in the worker's log. It runs here against the test's dev server (the
// demo reuses a server that answers) and a database of its own.
func TestDemoPrintsNoErrorLine(t *testing.T) {
	t.Setenv("DATABASE_URL", agentsagatest.NewDatabase(t))
	t.Setenv("TEMPORAL_ADDRESS", devServer.FrontendHostPort())
	// The demo's worker logs through slog's default logger, as under
	// `make demo`; this one keeps every level from INFO up.
	var logs lockedBuffer
	previous := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(previous) })
	t.Cleanup(func() {
		// The demo's worker made sure the reconciler runs, on its queue;
		// later tests' workers start their own.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = devServer.Client().TerminateWorkflow(ctx, workflows.ReconcilerID, "", "test over")
	})

	var out bytes.Buffer
	cmd := rootCommand()
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"demo", "--exit"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, cmd.ExecuteContext(ctx), out.String())

	printed, logged := out.String(), logs.String()
	// Positive controls: both runs ran, and their failures were logged.
	assert.Contains(t, printed, "refund desk: ")
	assert.Contains(t, printed, "run demo-seed002-")
	// It ends by replaying seed 002's run: the same calls, nothing sent.
	assert.Regexp(t, `recorded demo-seed002-\w+  vs  candidate replay-demo-seed002-\w+-1\n`, printed)
	assert.Contains(t, printed, "divergences: 0\n")
	assert.Contains(t, printed, "the search and lookup servers received 0 requests during the replay")
	// The live page's link stands beside the Temporal UI's, and the key
	// it asks for is printed once.
	// (The UI's link is printed only for the dev server's own address,
	// which this test's server does not have.)
	assert.Regexp(t, `\nlive: http://127\.0\.0\.1:\d+/runs/demo-refund-\w+ `, printed)
	assert.Regexp(t, `api: key "dev" with every scope, for this stack \(the page asks for it\): agentsaga_\S+\n`, printed)
	assert.Contains(t, logged, "retry hook: the call failed")
	assert.Contains(t, logged, "status=503")
	assert.Contains(t, logged, "status=400")
	for name, text := range map[string]string{"printed": printed, "logged": logged} {
		for _, line := range strings.Split(text, "\n") {
			assert.NotContains(t, line, "ERROR", "the demo %s an ERROR line", name)
		}
	}
}
