package worker_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// A worker run as `agentsaga worker` runs it (worker.Run), connected over
// mutual TLS with an API key, answers /healthz, and /readyz once it is
// connected to Temporal and Postgres with the schema current. Its context
// ends (SIGTERM) while a tool call is inside the tool: /readyz turns 503
// (draining), Run waits for the call, which finishes, and returns; the
// run completes on another worker, and the tool was called once, in one
// attempt.
func TestStopDrainsTheCallInFlight(t *testing.T) {
	isolateTemporalEnv(t)
	serverCA, clientCA := newTestCA(t, "server"), newTestCA(t, "clients")
	const key = "tmprl-drain-test-key-5e4d3c2b1a"
	frontend := startGuardedFrontend(t, serverCA, clientCA, key)
	certFile, keyFile := clientCA.issue(t, "drain-worker", false)
	for name, value := range map[string]string{"TEMPORAL_ADDRESS": frontend.Address, "TEMPORAL_API_KEY": key,
		"TEMPORAL_TLS_CLIENT_CERT_PATH": certFile, "TEMPORAL_TLS_CLIENT_KEY_PATH": keyFile,
		"TEMPORAL_TLS_SERVER_CA_CERT_PATH": serverCA.PEM, "TEMPORAL_TLS_SERVER_NAME": "temporal.test"} {
		t.Setenv(name, value)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var mu sync.Mutex
	requests := map[string]int{}
	arrived, release := make(chan struct{}), make(chan struct{})
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		requests[key]++
		first := requests[key] == 1
		mu.Unlock()
		if first {
			close(arrived)
			<-release
		}
		fmt.Fprint(w, `{"charged": true}`)
	}))
	defer tool.Close()
	var releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	defer letGo() // before the tool closes, which waits for its handlers

	queue := "drain-" + fmt.Sprint(time.Now().UnixNano())
	cfg := worker.ConfigFromEnv()
	cfg.DatabaseURL, cfg.TaskQueue, cfg.Retention = ledgertest.NewPooledDatabase(t), queue, -1
	cfg.MetricsAddr, cfg.StopTimeout = freeAddress(t), 30*time.Second
	// Run starts the reconciler, on this queue; the tests that look at it
	// start their own.
	t.Cleanup(func() {
		_ = temporalClient.TerminateWorkflow(context.Background(), workflows.ReconcilerID, "", "test over")
	})
	runCtx, sigterm := context.WithCancel(ctx)
	defer sigterm()
	returned := make(chan error, 1)
	go func() { returned <- worker.Run(runCtx, cfg) }()

	base := "http://" + cfg.MetricsAddr
	code, body := waitForProbe(ctx, t, base+worker.ReadyPath, http.StatusOK, returned)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "temporal: ok")
	assert.Contains(t, body, "postgres: ok")
	assert.Contains(t, body, "migrations: ok")
	code, _ = get(t, base+worker.HealthPath)
	assert.Equal(t, http.StatusOK, code)
	code, body = get(t, base+worker.MetricsPath)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "agentsaga_", "the metrics are served beside the probes")

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: charge once
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {amount: 1}}]
    - content: charged
tools:
  - name: charge
    kind: http
    url: %s
    timeout_seconds: 60
    parameters: {type: object, properties: {amount: {type: number}}}
`, tool.URL)))
	require.NoError(t, err)
	id := "drain-" + fmt.Sprint(time.Now().UnixNano())
	// A new ID on a new database: no ledger can have it.
	run, err := agentsaga.Start(ctx, temporalClient, id, spec, agentsaga.StartOptions{TaskQueue: queue, SkipLedgerCheck: true})
	require.NoError(t, err)
	select {
	case <-arrived:
	case err := <-returned:
		t.Fatalf("the worker stopped before the call arrived: %v", err)
	case <-ctx.Done():
		t.Fatal("the tool call never arrived")
	}

	sigterm()
	code, body = waitForProbe(ctx, t, base+worker.ReadyPath, http.StatusServiceUnavailable, returned)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Contains(t, body, "draining")
	code, _ = get(t, base+worker.HealthPath)
	assert.Equal(t, http.StatusOK, code, "alive while it drains")
	select {
	case err := <-returned:
		t.Fatalf("Run returned (%v) while a call was in flight; it must drain", err)
	case <-time.After(time.Second):
	}
	letGo()
	select {
	case err := <-returned:
		require.NoError(t, err)
	case <-time.After(cfg.StopTimeout):
		t.Fatal("Run did not return once the call finished")
	}

	// The rest of the run goes to another worker.
	store, err := ledger.Open(ctx, cfg.DatabaseURL)
	require.NoError(t, err)
	defer store.Close()
	next := startWorker(ctx, t, store, queue)
	defer next.Stop()
	result, err := run.Result(ctx)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)

	mu.Lock()
	assert.Equal(t, map[string]int{id + "/step-001-call-1-charge": 1}, requests, "one request, none re-sent")
	mu.Unlock()
	history, err := workertest.History(ctx, temporalClient, id, "")
	require.NoError(t, err)
	starts := 0
	for _, event := range history.Events {
		if attrs := event.GetActivityTaskStartedEventAttributes(); attrs != nil && attrs.GetAttempt() > 1 {
			t.Errorf("event %d: attempt %d of an activity: the drain let no call fail", event.GetEventId(), attrs.GetAttempt())
		}
		if event.GetActivityTaskScheduledEventAttributes() != nil && strings.HasSuffix(event.GetActivityTaskScheduledEventAttributes().GetActivityId(), "charge") {
			starts++
		}
	}
	assert.Equal(t, 1, starts, "the charge was scheduled once")
	_, bearers := frontend.seen()
	for _, b := range bearers {
		require.Equal(t, "Bearer "+key, b)
	}
}

// /readyz names what is missing: here, a schema one migration short, as
// when a new binary meets a database nobody migrated.
func TestReadyNamesAnOldSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	isolateTemporalEnv(t)
	serverCA := newTestCA(t, "server")
	frontend := startGuardedFrontend(t, serverCA, nil, "")
	t.Setenv("TEMPORAL_ADDRESS", frontend.Address)
	t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", serverCA.PEM)
	t.Setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.test")
	t.Cleanup(func() {
		_ = temporalClient.TerminateWorkflow(context.Background(), workflows.ReconcilerID, "", "test over")
	})
	cfg := worker.ConfigFromEnv()
	cfg.DatabaseURL, cfg.TaskQueue, cfg.Retention = ledgertest.NewPooledDatabase(t), "ready-"+fmt.Sprint(time.Now().UnixNano()), -1
	cfg.MetricsAddr = freeAddress(t)
	runCtx, stop := context.WithCancel(ctx)
	returned := make(chan error, 1)
	go func() { returned <- worker.Run(runCtx, cfg) }()
	defer func() { stop(); <-returned }()
	base := "http://" + cfg.MetricsAddr
	code, body := waitForProbe(ctx, t, base+worker.ReadyPath, http.StatusOK, returned)
	require.Equal(t, http.StatusOK, code, body)

	store, err := ledger.Open(ctx, cfg.DatabaseURL)
	require.NoError(t, err)
	defer store.Close()
	_, err = ledgerdb.Of(store).Pool().Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)`)
	require.NoError(t, err)
	code, body = get(t, base+worker.ReadyPath)
	assert.Equal(t, http.StatusServiceUnavailable, code, body)
	assert.Contains(t, body, "migrations: the schema is at version")
	assert.Contains(t, body, "temporal: ok")
}

// waitForProbe polls url until it answers want (or the worker returned, or
// ctx ended) and returns the last answer.
func waitForProbe(ctx context.Context, t *testing.T, url string, want int, returned chan error) (int, string) {
	t.Helper()
	for {
		code, body := tryGet(url)
		if code == want {
			return code, body
		}
		select {
		case err := <-returned:
			t.Fatalf("the worker returned while waiting for %s to answer %d: %v", url, want, err)
		case <-ctx.Done():
			return code, body
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func tryGet(url string) (int, string) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	code, body := tryGet(url)
	require.NotZero(t, code, body)
	return code, body
}

// freeAddress is a loopback address nothing listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
