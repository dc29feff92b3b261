package worker_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// outage is a CRM that answers 503 until it is told to recover, and then
// applies each Idempotency-Key once. It counts every request per key. It
// answers each write with what it updated, or, when ack is set, with the
// same {"ok": true} every time, as many real write APIs do.
type outage struct {
	mu        sync.Mutex
	down      bool
	ack       bool
	requests  map[string]int
	applied   map[string]int
	firstSeen chan struct{}
	once      sync.Once
}

func newOutage() *outage {
	return &outage{down: true, requests: map[string]int{}, applied: map[string]int{}, firstSeen: make(chan struct{})}
}

func (o *outage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests[key]++
	o.once.Do(func() { close(o.firstSeen) })
	if o.down {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	o.applied[key]++
	if o.ack {
		fmt.Fprint(w, `{"ok": true}`)
		return
	}
	fmt.Fprintf(w, `{"updated": %q}`, key)
}

func (o *outage) recover() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = false
}

func (o *outage) counts() (requests, applied map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	requests, applied = map[string]int{}, map[string]int{}
	for k, v := range o.requests {
		requests[k] = v
	}
	for k, v := range o.applied {
		applied[k] = v
	}
	return requests, applied
}

// crmSpec is a run that updates the CRM twice, in two turns.
func crmSpec(t *testing.T, url string, escalateAfter int) workflows.RunSpec {
	t.Helper()
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: update the CRM twice
budget: {steps: 6}
escalate: {after_breaker_open_seconds: %d}
model:
  provider: scripted
  script:
    - tool_calls: [{name: crm, arguments: {field: a}}]
    - tool_calls: [{name: crm, arguments: {field: b}}]
    - content: both updated
tools:
  - name: crm
    kind: http
    url: %s
    timeout_seconds: 30
    parameters: {type: object, properties: {field: {type: string}}, required: [field]}
`, escalateAfter, url)))
	require.NoError(t, err)
	resolved, err := spec.Resolve()
	require.NoError(t, err)
	return resolved
}

// parkingBreaker opens after 3 failures and probes every second, so that a
// test's outage of a few seconds opens it and outlives a few probes.
var parkingBreaker = budget.BreakerConfig{Threshold: 3, Window: 30 * time.Second, Cooldown: time.Second}

// An outage shorter than escalate.after_breaker_open_seconds is waited
// out: the calls the open breaker refuses are parked on durable timers and
// go out once it closes. No run asks a human; each effect happens once;
// no refused call reached the CRM; the wait shows in the UI's current
// details and in the ledger (agentsaga show) while it lasts.
func TestShortOutageIsWaitedOutWithoutEscalation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store, crm, url, queue := startOutage(ctx, t)

	const runs = 6
	var handles []client.WorkflowRun
	for i := range runs {
		run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: fmt.Sprintf("short-outage-%d", i), TaskQueue: queue,
		}, workflows.AgentRun, crmSpec(t, url, 120))
		require.NoError(t, err)
		handles = append(handles, run)
	}
	<-crm.firstSeen

	// While the CRM is down, some run waits, and says so.
	var details, statusDetail string
	require.Eventually(t, func() bool {
		for i := range runs {
			id := fmt.Sprintf("short-outage-%d", i)
			if stored, err := ledgerdb.Of(store).GetRun(ctx, id); err == nil && strings.Contains(stored.StatusDetail, "waiting for tool crm") {
				statusDetail = stored.StatusDetail
				details = currentDetails(ctx, t, id)
				return strings.Contains(details, "waiting for tool crm")
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "no run showed that it waits for the breaker")
	t.Logf("ledger status detail while parked: %s", statusDetail)
	assert.Contains(t, details, "Open breakers:** crm")
	time.Sleep(3 * time.Second) // an outage that outlives a few probes
	crm.recover()

	escalations := 0
	for i, run := range handles {
		var result workflows.RunResult
		require.NoError(t, run.Get(ctx, &result), "run %d", i)
		if result.Status != agentsagatype.RunCompleted {
			escalations++
		}
		assert.Equal(t, agentsagatype.RunCompleted, result.Status, "run %d: %s", i, result.Reason)
		assert.Equal(t, 2, countTool(result.Trace, "crm"), "run %d", i)
		stored, err := ledgerdb.Of(store).GetRun(ctx, run.GetID())
		require.NoError(t, err)
		assert.Empty(t, stored.StatusDetail, "run %d: the wait is cleared once it ends", i)
	}
	requests, applied := crm.counts()
	duplicates := 0
	for key, n := range applied {
		duplicates += n - 1
		assert.Equal(t, 1, n, key)
	}
	assert.Len(t, applied, 2*runs, "every update applied")
	total := 0
	for _, n := range requests {
		total += n
	}
	t.Logf("escalations %d, duplicate effects %d, requests at the CRM %d for %d calls", escalations, duplicates, total, 2*runs)
	assert.Zero(t, escalations)

	// The leaf calls the runs booked are the requests the CRM saw: a call
	// refused at the gate cost none.
	leaves := 0
	for _, run := range handles {
		stored, err := ledgerdb.Of(store).ListLeafCalls(ctx, run.GetID())
		require.NoError(t, err)
		for _, l := range stored {
			if l.Kind == ledgerdb.LeafTool {
				leaves++
			}
		}
	}
	assert.Equal(t, total, leaves, "leaf calls booked = requests the CRM received")
}

// An outage longer than escalate.after_breaker_open_seconds escalates the
// run once the breaker has been open that long, and not before, with a
// reason that says so.
func TestLongOutageEscalatesAfterTheThreshold(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, _, url, queue := startOutage(ctx, t)

	const runs = 3
	started := time.Now()
	for i := range runs {
		_, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: fmt.Sprintf("long-outage-%d", i), TaskQueue: queue,
		}, workflows.AgentRun, crmSpec(t, url, 4))
		require.NoError(t, err)
	}
	for i := range runs {
		id := fmt.Sprintf("long-outage-%d", i)
		var stored agentsagatype.Run
		require.Eventually(t, func() bool {
			var err error
			stored, err = ledgerdb.Of(store).GetRun(ctx, id)
			return err == nil && stored.Status == agentsagatype.RunEscalated
		}, time.Minute, 200*time.Millisecond, "run %d never escalated", i)
		assert.Contains(t, stored.StatusDetail, "after_breaker_open_seconds", "run %d", i)
		assert.GreaterOrEqual(t, time.Since(started), 4*time.Second, "nobody is asked before the threshold")
		require.NoError(t, temporalClient.TerminateWorkflow(ctx, id, "", "test: done"))
	}
}

// startOutage starts a CRM that is down, and a worker whose breakers open
// after a few failures (parkingBreaker) on a queue of the test's own; both
// stop with the test.
func startOutage(ctx context.Context, t *testing.T) (*ledger.Store, *outage, string, string) {
	t.Helper()
	store := ledgertest.NewHandle(t)
	crm := newOutage()
	server := httptest.NewServer(crm)
	t.Cleanup(server.Close)
	queue := "parking-" + t.Name()
	w, err := worker.New(ctx, temporalClient, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, Breaker: parkingBreaker}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	return store, crm, server.URL, queue
}

// currentDetails is the run's current details, as the UI's User Metadata
// tab shows them.
func currentDetails(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	value, err := temporalClient.QueryWorkflow(ctx, id, "", "__temporal_workflow_metadata")
	require.NoError(t, err)
	var metadata sdkpb.WorkflowMetadata
	require.NoError(t, value.Get(&metadata))
	return metadata.GetCurrentDetails()
}

func countTool(trace []workflows.TraceEntry, tool string) int {
	n := 0
	for _, e := range trace {
		if e.Kind == "tool" && e.Tool == tool && e.Error == "" {
			n++
		}
	}
	return n
}

// downModel is an OpenAI-compatible model server that answers 503 for
// outage after its first request, then answers every turn "all done".
type downModel struct {
	// minRefusals keeps it down for that many refusals however long they
	// take (napModel's).
	minRefusals        int32
	downUntil          atomic.Int64
	requests, refusals atomic.Int32
}

func (m *downModel) serve(outage time.Duration) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.requests.Add(1)
		m.downUntil.CompareAndSwap(0, time.Now().Add(outage).UnixNano())
		if time.Now().UnixNano() < m.downUntil.Load() || m.refusals.Load() < m.minRefusals {
			m.refusals.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"message":"the model is overloaded","type":"server_error"}}`)
			return
		}
		request, _ := io.ReadAll(r.Body)
		_ = providerwire.WriteChatCompletion(w, providerwire.Streams(request), []byte(`{"id":"c1","object":"chat.completion","created":0,"model":"gpt-4o-mini",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"all done"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`))
	}))
}

// A short outage of the model provider is waited out as a tool's is: the
// turn the model's open breaker refuses waits on a durable timer and goes
// out again under its first key, and the run completes without a human.
// Before agentsaga-commands 1 the run failed and rolled back.
func TestShortModelOutageIsWaitedOut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store, _, _, queue := startOutage(ctx, t)
	model := downModel{minRefusals: int32(parkingBreaker.Threshold)}
	server := model.serve(3 * time.Second)
	defer server.Close()
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: answer
budget: {steps: 4}
escalate: {after_breaker_open_seconds: 60}
model: {provider: openai, name: gpt-4o-mini, base_url: %q}
`, server.URL+"/v1")))
	require.NoError(t, err)
	spec, err = spec.Resolve()
	require.NoError(t, err)
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "model-outage", TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "all done", result.Answer)

	history, err := workertest.History(ctx, temporalClient, "model-outage", run.GetRunID())
	require.NoError(t, err)
	timers := 0
	for _, event := range history.Events {
		if event.GetTimerStartedEventAttributes() != nil {
			timers++
		}
	}
	assert.Positive(t, timers, "the refused turn was parked on a timer")
	stored, err := ledgerdb.Of(store).GetRun(ctx, "model-outage")
	require.NoError(t, err)
	assert.Empty(t, stored.StatusDetail, "the wait is cleared once it ends")
	// The breaker (3 failures, 1 s cooldown) let through the failures that
	// opened it and about one probe a second, not a retry storm.
	t.Logf("model requests %d, refused by the provider %d, parks %d", model.requests.Load(), model.refusals.Load(), timers)
	assert.LessOrEqual(t, int(model.refusals.Load()), parkingBreaker.Threshold+5)
}
