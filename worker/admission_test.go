package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/admission"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// Admission by run on a real dev server (issue 43): runs charged to an
// account are admitted whole, or wait queued, and the worker's admission
// loop starts them as room frees, told by the ledger's notifications. The
// model holds each run's first turn until the test lets it answer, so
// that an admitted run keeps its place for as long as the test needs.
// Each test checks, once its runs have ended, that no run was admitted
// twice and nothing is held (ledgertest.AdmissionViolations), and logs the
// count. The deadlines are generous but under the 2 minutes after which a
// queued run asks the ledger by itself: a run that starts within them was
// started by the loop's signal.

// admissionPrice makes a run's one turn cost a few thousandths of a
// dollar: what the runs spend is next to what admitting them reserves.
const admissionPrice = 10.0

// gatedModel is an OpenAI-compatible model that answers each run's turn
// ("run ID" is the goal) once the test opens the run's gate, and records
// the order in which runs reached it.
type gatedModel struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
	open  bool // every gate, those to come included
	order []string
}

func (m *gatedModel) gate(id string) chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gates == nil {
		m.gates = map[string]chan struct{}{}
	}
	g, ok := m.gates[id]
	if !ok {
		g = make(chan struct{})
		if m.open {
			close(g)
		}
		m.gates[id] = g
	}
	return g
}

// openAll lets every run answer, now and from now on.
func (m *gatedModel) openAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.open = true
	for _, g := range m.gates {
		select {
		case <-g:
		default:
			close(g)
		}
	}
}

// reached is the runs whose turn reached the model, in order.
func (m *gatedModel) reached() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.order...)
}

func (m *gatedModel) serve(t *testing.T) *httptest.Server {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content any    `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("model: %v", err)
		}
		id := ""
		for _, msg := range req.Messages {
			if text, ok := msg.Content.(string); ok && msg.Role == "user" && strings.HasPrefix(text, "run ") {
				id = strings.TrimPrefix(text, "run ")
			}
		}
		m.mu.Lock()
		if !containsString(m.order, id) {
			m.order = append(m.order, id)
		}
		m.mu.Unlock()
		select {
		case <-m.gate(id):
		case <-r.Context().Done():
			return
		}
		prompt, completion := int64(len(body)/4), int64(20)
		reply := fmt.Sprintf(`{"id":"c","object":"chat.completion","created":0,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			prompt, completion, prompt+completion)
		if err := providerwire.WriteChatCompletion(w, providerwire.Streams(body), []byte(reply)); err != nil {
			t.Errorf("model: %v", err)
		}
	}))
	t.Cleanup(server.Close)
	t.Cleanup(m.openAll) // a handler still waiting lets the server close
	return server
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// admissionBench is a test's worker, ledger (with the admission log) and
// gated model.
type admissionBench struct {
	t     *testing.T
	store *ledger.Store
	db    *ledgerdb.Store
	queue string
	model *gatedModel
	url   string
	runs  map[string]client.WorkflowRun
}

func newAdmissionBench(ctx context.Context, t *testing.T, prefix string) *admissionBench {
	t.Helper()
	store, queue := defaultBreakerWorker(ctx, t, prefix)
	b := &admissionBench{t: t, store: store, db: ledgerdb.Of(store), queue: queue, model: &gatedModel{}, runs: map[string]client.WorkflowRun{}}
	b.url = b.model.serve(t).URL
	ledgertest.LogAdmissions(t, b.db)
	return b
}

// start starts a run charged to account (budget.usd usd when set, at
// priority when set; model, when set, replaces the model's name and adds
// to its fields) and waits until it is admitted or queued, so that the
// runs a test starts one after another are queued in that order.
func (b *admissionBench) start(ctx context.Context, id, account string, usd float64, priority int, model string) string {
	b.t.Helper()
	budget := fmt.Sprintf("{steps: 3, seconds: 120, account: %s}", account)
	if usd > 0 {
		budget = fmt.Sprintf("{steps: 3, seconds: 120, account: %s, usd: %v}", account, usd)
	}
	spec := resolvedSpec(b.t, fmt.Sprintf(`
goal: run %s
budget: %s
priority: %d
model: {provider: openai, name: %s, base_url: %q, max_tokens: 40}
prices: {models: {gpt-4o-mini: {input_per_million: %[6]v, output_per_million: %[6]v}, gpt-4o: {input_per_million: %[6]v, output_per_million: %[6]v}}}
`, id, budget, priority, cmp.Or(model, "gpt-4o-mini"), b.url+"/v1", admissionPrice))
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: b.queue}, workflows.AgentRun, spec)
	require.NoError(b.t, err)
	b.runs[id] = run
	return b.waitAdmission(ctx, id, "admitted", "queued")
}

// status is where the run stands in the admission queue ("" before it
// asked).
func (b *admissionBench) status(ctx context.Context, id string) string {
	var status string
	_ = b.db.Pool().QueryRow(ctx, `SELECT status FROM run_admissions WHERE run_id = $1`, id).Scan(&status)
	return status
}

// waitAdmission waits until the run's admission is one of statuses, and
// returns it.
func (b *admissionBench) waitAdmission(ctx context.Context, id string, statuses ...string) string {
	b.t.Helper()
	for {
		if s := b.status(ctx, id); containsString(statuses, s) {
			return s
		}
		select {
		case <-ctx.Done():
			b.t.Fatalf("%s's admission never became %v (it is %q)", id, statuses, b.status(ctx, id))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReached waits until n runs' turns reached the model.
func (b *admissionBench) waitReached(ctx context.Context, n int) {
	b.t.Helper()
	for len(b.model.reached()) < n {
		select {
		case <-ctx.Done():
			b.t.Fatalf("%d runs reached the model (%v), not %d", len(b.model.reached()), b.model.reached(), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// finish lets every run answer, waits until each has completed, and
// checks the invariants once they all have.
func (b *admissionBench) finish(ctx context.Context) {
	b.t.Helper()
	b.model.openAll()
	for id, run := range b.runs {
		var result workflows.RunResult
		require.NoError(b.t, run.Get(ctx, &result), id)
		assert.Equal(b.t, agentsagatype.RunCompleted, result.Status, "%s: %s", id, result.Reason)
	}
	violations := ledgertest.AdmissionViolations(ctx, b.t, b.db, true)
	b.t.Logf("%d runs; admitted in the order %v; their turns reached the model in the order %v; violations=%d",
		len(b.runs), ledgertest.AdmittedOrder(b.t, b.db), b.model.reached(), violations)
	assert.Zero(b.t, violations)
}

// The queue of a capped account is FIFO: two runs fit under its $1 at
// $0.40 each, four wait, queued, each saying why; as the runs admitted
// end, the loop starts the ones that waited in the order they came.
func TestAdmissionFIFOOnTheDevServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newAdmissionBench(ctx, t, "adm-fifo")
	_, err := b.store.SetSpendCap(ctx, ledger.SpendCap{Account: "acme", Period: ledger.SpendMonth, USD: 1}, "ann")
	require.NoError(t, err)
	var ids []string
	for i := range 6 {
		id := fmt.Sprintf("adm-fifo-%d", i)
		ids = append(ids, id)
		want := "queued"
		if i < 2 {
			want = "admitted"
		}
		assert.Equal(t, want, b.start(ctx, id, "acme/support", 0.4, 0, ""), id)
	}
	b.waitReached(ctx, 2)
	run, err := b.db.GetRun(ctx, "adm-fifo-3")
	require.NoError(t, err)
	assert.Equal(t, "queued", run.Status)
	assert.Contains(t, run.StatusDetail, "behind run adm-fifo-2, which waits: account acme has $0.2000 of its $1.0000 per month spend cap for runs")
	queue, err := b.db.ListQueue(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, queue, 4)
	for i, q := range queue {
		assert.Equal(t, ids[i+2], q.RunID)
	}
	assert.ElementsMatch(t, ids[:2], b.model.reached(), "the queued runs took no turn")
	b.finish(ctx)
	assert.Equal(t, ids, ledgertest.AdmittedOrder(t, b.db))
}

// priority orders the queue: runs queued at priorities 5, 3, 1 and 2 are
// admitted 1, 2, 3, 5 as room frees.
func TestAdmissionPriorityOnTheDevServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newAdmissionBench(ctx, t, "adm-priority")
	_, err := b.store.SetSpendCap(ctx, ledger.SpendCap{Account: "acme", Period: ledger.SpendMonth, USD: 1}, "ann")
	require.NoError(t, err)
	for _, id := range []string{"adm-prio-first", "adm-prio-second"} {
		assert.Equal(t, "admitted", b.start(ctx, id, "acme", 0.45, 0, ""))
	}
	for _, p := range []int{5, 3, 1, 2} {
		assert.Equal(t, "queued", b.start(ctx, fmt.Sprintf("adm-prio-%d", p), "acme", 0.3, p, ""))
	}
	b.waitReached(ctx, 2)
	b.finish(ctx)
	assert.Equal(t, []string{"adm-prio-first", "adm-prio-second", "adm-prio-1", "adm-prio-2", "adm-prio-3", "adm-prio-5"},
		ledgertest.AdmittedOrder(t, b.db))
}

// A raised cap starts the runs that wait at once: the cap's change
// notifies the loop, which admits them and signals their workflows, well
// before the loop's sweep, and the runs' own recheck, would have.
func TestAdmissionRaisedCapStartsWaitingRuns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newAdmissionBench(ctx, t, "adm-raise")
	capped := ledger.SpendCap{Account: "acme", Period: ledger.SpendMonth, USD: 0.5}
	_, err := b.store.SetSpendCap(ctx, capped, "ann")
	require.NoError(t, err)
	assert.Equal(t, "admitted", b.start(ctx, "adm-raise-0", "acme", 0.4, 0, ""))
	assert.Equal(t, "queued", b.start(ctx, "adm-raise-1", "acme", 0.4, 0, ""))
	assert.Equal(t, "queued", b.start(ctx, "adm-raise-2", "acme", 0.4, 0, ""))
	b.waitReached(ctx, 1)
	capped.USD = 1.5
	raised := time.Now()
	_, err = b.store.SetSpendCap(ctx, capped, "bob")
	require.NoError(t, err)
	b.waitAdmission(ctx, "adm-raise-1", "admitted")
	b.waitAdmission(ctx, "adm-raise-2", "admitted")
	admitted := time.Since(raised)
	b.waitReached(ctx, 3) // the loop told their workflows: both took their turn
	started := time.Since(raised)
	t.Logf("the raised cap admitted the waiting runs after %s; their turns reached the model after %s (the sweep is every %s, a run's own recheck every 2m)",
		admitted.Round(time.Millisecond), started.Round(time.Millisecond), admission.Sweep)
	assert.Less(t, admitted, admission.Sweep/2, "admitted by the cap's notification, not by the sweep")
	b.finish(ctx)
	assert.Equal(t, []string{"adm-raise-0", "adm-raise-1", "adm-raise-2"}, ledgertest.AdmittedOrder(t, b.db))
}

// A period reset starts the runs that waited for it, in order: the month
// spent $0.90 of its $1, the runs wait; the clock moves to the next month
// (the rows of the caps' periods move back one) and the loop wakes, as
// it does at a reset; two runs fit the new month, the third follows when
// one ends.
func TestAdmissionPeriodResetOnAMovedClock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newAdmissionBench(ctx, t, "adm-reset")
	_, err := b.store.SetSpendCap(ctx, ledger.SpendCap{Account: "acme", Period: ledger.SpendMonth, USD: 1}, "ann")
	require.NoError(t, err)
	r, err := b.db.ReserveSpend(ctx, "earlier/step-001-model", "acme", 0.9, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Admitted)
	_, err = b.db.SettleSpend(ctx, "earlier/step-001-model", 0.9)
	require.NoError(t, err)
	ids := []string{"adm-reset-0", "adm-reset-1", "adm-reset-2"}
	for _, id := range ids {
		assert.Equal(t, "queued", b.start(ctx, id, "acme", 0.4, 0, ""))
	}
	ledgertest.MoveClock(ctx, t, b.db, ledger.SpendMonth)
	_, err = b.db.Pool().Exec(ctx, `SELECT pg_notify($1, 'acme')`, ledgerdb.AdmissionChannel)
	require.NoError(t, err)
	b.waitReached(ctx, 2)
	assert.Equal(t, "queued", b.status(ctx, ids[2]), "the new month holds two")
	b.finish(ctx)
	assert.Equal(t, ids, ledgertest.AdmittedOrder(t, b.db))
	periods, err := b.db.SpendPeriods(ctx, "acme", time.Now().AddDate(0, -2, 0))
	require.NoError(t, err)
	assert.Len(t, periods, 2, "the month before and this one")
}

// max_concurrent_runs: an account's (acme: 2) admits two runs at once
// and the others wait for a place; a model's (rate_limit of the spec:
// 1) runs one at a time, whatever the account.
func TestAdmissionMaxConcurrentRunsOnTheDevServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newAdmissionBench(ctx, t, "adm-concurrent")
	require.NoError(t, b.db.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme", MaxConcurrentRuns: 2}, "ann"))
	var acme []string
	for i := range 5 {
		id := fmt.Sprintf("adm-conc-%d", i)
		acme = append(acme, id)
		want := "queued"
		if i < 2 {
			want = "admitted"
		}
		assert.Equal(t, want, b.start(ctx, id, "acme/"+[]string{"a", "b"}[i%2], 0, 0, ""), id)
	}
	run, err := b.db.GetRun(ctx, "adm-conc-2")
	require.NoError(t, err)
	assert.Contains(t, run.StatusDetail, "account acme runs 2 of its 2 concurrent runs (max_concurrent_runs)")
	// Another model than acme's runs': all runs on a model count against
	// its limit, those that do not declare it too.
	const limited = "gpt-4o, rate_limit: {max_concurrent_runs: 1}"
	assert.Equal(t, "admitted", b.start(ctx, "adm-model-0", "initech", 0, 0, limited))
	assert.Equal(t, "queued", b.start(ctx, "adm-model-1", "hooli", 0, 0, limited))
	b.waitReached(ctx, 3)
	time.Sleep(200 * time.Millisecond) // what else would reach the model now
	assert.Len(t, b.model.reached(), 3, "two of acme's runs and one of the model's: %v", b.model.reached())
	b.finish(ctx)
	assert.Equal(t, 2, ledgertest.MaxAdmittedAtOnce(t, b.db, "acme"), "acme never ran more than two at once")
	var model int
	require.NoError(t, b.db.Pool().QueryRow(ctx, `SELECT max(model_running) FROM test_admissions WHERE run_id LIKE 'adm-model-%'`).Scan(&model))
	assert.Equal(t, 1, model, "the model never ran more than one at once")
	order := ledgertest.AdmittedOrder(t, b.db)
	var acmeOrder []string
	for _, id := range order {
		if strings.HasPrefix(id, "adm-conc-") {
			acmeOrder = append(acmeOrder, id)
		}
	}
	assert.Equal(t, acme, acmeOrder)
}

// Fairness between two accounts under one root (fleet, 2 runs at once):
// fleet/a floods the queue with 8 runs, then fleet/b starts 2; b's first
// run is admitted at the second place that frees, ahead of a's backlog,
// and the two then take turns.
func TestAdmissionFairnessBetweenAccounts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newAdmissionBench(ctx, t, "adm-fair")
	require.NoError(t, b.db.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "fleet", MaxConcurrentRuns: 2}, "ann"))
	for i := range 8 {
		b.start(ctx, fmt.Sprintf("adm-fair-a%d", i), "fleet/a", 0, 0, "")
	}
	for i := range 2 {
		assert.Equal(t, "queued", b.start(ctx, fmt.Sprintf("adm-fair-b%d", i), "fleet/b", 0, 0, ""))
	}
	b.waitReached(ctx, 2)
	b.finish(ctx)
	order := ledgertest.AdmittedOrder(t, b.db)
	place := func(id string) int {
		for i, x := range order {
			if x == id {
				return i
			}
		}
		return -1
	}
	// a0 and a1 ran when b came; then a2, b0, a3, b1: b's runs take every
	// second place.
	assert.LessOrEqual(t, place("adm-fair-b0"), 3, "b's first run came after at most one more of a's: %v", order)
	assert.LessOrEqual(t, place("adm-fair-b1"), 5, "and its second after one more: %v", order)
	assert.Equal(t, 2, ledgertest.MaxAdmittedAtOnce(t, b.db, "fleet"))
}
