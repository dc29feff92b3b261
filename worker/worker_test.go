package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

var temporalClient client.Client

func TestMain(m *testing.M) {
	workertest.Main(m, func(server *testsuite.DevServer) { temporalClient = server.Client() })
}

// startWorker starts a worker on queue against store; the caller stops it
// (some tests stop it mid-run on purpose).
func startWorker(ctx context.Context, t *testing.T, store *ledger.Store, queue string) sdkworker.Worker {
	t.Helper()
	w, err := worker.New(ctx, temporalClient, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	return w
}

// sideEffects is an HTTP tool that deduplicates by Idempotency-Key, as a
// payment API does, and counts how often each key arrived and was applied.
// Requests whose key contains blockKey hang until the caller gives up, so a
// test can lose a worker in the middle of that call.
type sideEffects struct {
	mu       sync.Mutex
	seen     map[string]int
	applied  map[string]int
	blockKey string
	blocked  chan struct{}
	release  chan struct{}
}

func newSideEffects(blockKey string) *sideEffects {
	return &sideEffects{seen: map[string]int{}, applied: map[string]int{}, blockKey: blockKey, blocked: make(chan struct{}), release: make(chan struct{})}
}

func (s *sideEffects) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.seen[key]++
	first := s.applied[key] == 0
	if first {
		s.applied[key]++
	}
	hang := first && s.blockKey != "" && strings.Contains(key, s.blockKey)
	s.mu.Unlock()
	if hang {
		close(s.blocked)
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
		return
	}
	fmt.Fprintf(w, `{"charged": true, "key": %q}`, key)
}

func (s *sideEffects) counts() (seen, applied map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen, applied = map[string]int{}, map[string]int{}
	for k, v := range s.seen {
		seen[k] = v
	}
	for k, v := range s.applied {
		applied[k] = v
	}
	return seen, applied
}

func chargeSpec(url string) workflows.RunSpec {
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: charge twice, then report
budget: {steps: 5}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {amount: 1}}]
    - tool_calls: [{name: charge, arguments: {amount: 2}}]
    - content: charged 1 and 2
tools:
  - name: charge
    kind: http
    url: %s
    timeout_seconds: 3
    parameters: {type: object, properties: {amount: {type: number}}, required: [amount]}
`, url)))
	if err != nil {
		panic(err)
	}
	return spec
}

// A worker is lost in the middle of a tool call; a second worker finishes
// the run, and every side effect happens exactly once.
func TestSecondWorkerFinishesRunAfterFirstIsLost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	tool := newSideEffects("step-002-call-1-charge")
	server := httptest.NewServer(tool)
	defer server.Close()
	defer close(tool.release)
	queue := "lost-worker-" + t.Name()

	first := startWorker(ctx, t, store, queue)

	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: "lost-worker-run", TaskQueue: queue, StaticSummary: "charge twice",
	}, workflows.AgentRun, chargeSpec(server.URL))
	require.NoError(t, err)

	select {
	case <-tool.blocked:
	case <-ctx.Done():
		t.Fatal("the second charge never reached the tool")
	}
	first.Stop()

	second := startWorker(ctx, t, store, queue)
	defer second.Stop()

	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "charged 1 and 2", result.Answer)

	seen, applied := tool.counts()
	firstKey, secondKey := "lost-worker-run/step-001-call-1-charge", "lost-worker-run/step-002-call-1-charge"
	assert.Equal(t, map[string]int{firstKey: 1, secondKey: 1}, applied, "each side effect exactly once")
	assert.Equal(t, 1, seen[firstKey], "a completed call never reaches the tool again")
	assert.GreaterOrEqual(t, seen[secondKey], 2, "the lost call was retried by the second worker under the same key")

	actions, err := ledgerdb.Of(store).ListActions(ctx, "lost-worker-run")
	require.NoError(t, err)
	require.Len(t, actions, 2)
	for _, a := range actions {
		assert.Equal(t, agentsagatype.ActionCompleted, a.Status, a.Key)
	}
	assert.GreaterOrEqual(t, actions[1].Attempts, 2)

	stored, err := ledgerdb.Of(store).GetRun(ctx, "lost-worker-run")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, stored.Status)
}
