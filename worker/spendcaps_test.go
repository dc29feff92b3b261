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
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/providerwire"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// Spend caps on a real dev server (issue 31), one test per on_exhausted.
// The model is an OpenAI-compatible server that reports usage as a
// provider does; the test prices that usage itself and checks, after each
// run, the invariants: no period of the account spent more than its cap,
// nothing is left reserved, and what the ledger spent is what the
// provider's usage cost. Violations are counted.

// spendPrice is the test's model's price, $1,000 per million tokens both
// ways, so that a turn costs cents and a cap of a dollar binds in a few.
const spendPrice = 1000.0

// billedModel is an OpenAI-compatible server that asks for the note tool
// until the conversation holds stopAfter tool results, then answers; a
// request without tools (a finishing turn) gets a partial answer. Each
// response reports usage: a quarter of the request's bytes as prompt
// tokens (a tokenizer's count is about that), 20 completion tokens.
type billedModel struct {
	stopAfter int
	price     float64 // USD per million tokens both ways; 0: spendPrice
	mu        sync.Mutex
	requests  int
	usd       float64 // the reported usage, priced by the test
	last      string  // the last request's body
}

func (m *billedModel) serve(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []map[string]any `json:"messages"`
			Tools    []any            `json:"tools"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Errorf("model: %v", err)
		}
		results := 0
		for _, msg := range req.Messages {
			if msg["role"] == "tool" {
				results++
			}
		}
		prompt, completion := int64(len(body)/4), int64(20)
		m.mu.Lock()
		m.requests++
		m.usd += float64(prompt+completion) * cmp.Or(m.price, spendPrice) / 1e6
		m.last = string(body)
		m.mu.Unlock()
		message := fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_%d","type":"function","function":{"name":"note","arguments":"{\"index\":%d}"}}]}`, results+1, results+1)
		finish := "tool_calls"
		switch {
		case len(req.Tools) == 0:
			message, finish = `{"role":"assistant","content":"PARTIAL ANSWER: some notes\nHANDOFF NOTE: the account ran out"}`, "stop"
		case results >= m.stopAfter:
			message, finish = `{"role":"assistant","content":"all noted"}`, "stop"
		}
		reply := fmt.Sprintf(`{"id":"c","object":"chat.completion","created":0,"model":"gpt-4o-mini","choices":[{"index":0,"message":%s,"finish_reason":%q}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			message, finish, prompt, completion, prompt+completion)
		if err := providerwire.WriteChatCompletion(w, providerwire.Streams(body), []byte(reply)); err != nil {
			t.Errorf("model: %v", err)
		}
	}))
}

func (m *billedModel) billed() (int, float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests, m.usd
}

// cappedSpec is a run of up to 30 turns charged to account, on model
// (an OpenAI-compatible base URL) with a note tool at notes.
func cappedSpec(t *testing.T, account, model, notes string) workflows.RunSpec {
	t.Helper()
	return resolvedSpec(t, fmt.Sprintf(`
goal: take notes
budget: {steps: 30, seconds: 300, account: %s}
model: {provider: openai, name: gpt-4o-mini, base_url: %q, max_tokens: 40}
prices: {models: {gpt-4o-mini: {input_per_million: %[4]v, output_per_million: %[4]v}}}
tools:
  - name: note
    kind: http
    url: %[3]q
    parameters: {type: object, properties: {index: {type: integer}}, required: [index]}
`, account, model+"/v1", notes, spendPrice))
}

// noteServer is the note tool: it answers every note alike.
func noteServer(t *testing.T) *httptest.Server {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"noted": true}`) }))
	t.Cleanup(server.Close)
	return server
}

// spendViolations checks the invariants of account's periods since the
// test began: none spent more than its cap, none holds a reservation, and
// together they spent what the provider's usage cost. It returns the
// violations, each logged.
func spendViolations(ctx context.Context, t *testing.T, store *ledger.Store, account string, cap float64, since time.Time, billed float64) int {
	t.Helper()
	periods, err := ledgerdb.Of(store).SpendPeriods(ctx, account, since.Add(-time.Hour*24*31))
	require.NoError(t, err)
	violations, spent := 0, 0.0
	for _, p := range periods {
		spent += p.Spent
		if p.Spent > cap+1e-9 {
			violations++
			t.Errorf("%s's %s from %s spent $%.4f of a $%.2f cap", account, p.Period, p.Starts, p.Spent, cap)
		}
		if p.Reserved > 1e-9 || p.Reserved < -1e-9 {
			violations++
			t.Errorf("%s's %s from %s still holds $%.4f", account, p.Period, p.Starts, p.Reserved)
		}
	}
	if diff := spent - billed; diff > 1e-6 || diff < -1e-6 {
		violations++
		t.Errorf("%s spent $%.6f by the ledger and $%.6f by the provider's usage", account, spent, billed)
	}
	t.Logf("%s: %d periods, spent $%.4f of $%.2f a period (the provider's usage: $%.4f); violations %d", account, len(periods), spent, cap, billed, violations)
	return violations
}

// cappedRun is a run charged to account on a worker of its own, under
// cap, against a billed model that answers after stopAfter notes.
type cappedRun struct {
	store   *ledger.Store
	run     client.WorkflowRun
	model   *billedModel
	started time.Time
}

func startCappedRun(ctx context.Context, t *testing.T, id, account string, cap ledger.SpendCap, stopAfter int) cappedRun {
	t.Helper()
	store, queue := defaultBreakerWorker(ctx, t, id)
	started := time.Now()
	_, err := store.SetSpendCap(ctx, cap, "ann")
	require.NoError(t, err)
	model := &billedModel{stopAfter: stopAfter}
	server := model.serve(t)
	t.Cleanup(server.Close)
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun,
		cappedSpec(t, account, server.URL, noteServer(t).URL))
	require.NoError(t, err)
	return cappedRun{store: store, run: run, model: model, started: started}
}

// on_exhausted: finish. The run takes notes until the account's monthly
// cap cannot pay for the next turn, and ends partial without another
// model call, naming the account, the cap and when it resets.
func TestSpendCapFinishesTheRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCappedRun(ctx, t, "spend-finish", "acme/support", ledger.SpendCap{Account: "acme", Period: ledger.SpendMonth, USD: 1}, 100)
	store, model, started := c.store, c.model, c.started
	var result workflows.RunResult
	require.NoError(t, c.run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunPartial, result.Status, result.Reason)
	assert.Regexp(t, `^the spend cap of account acme \(\$1\.00 a month\) has \$0\.\d\d spent and \$0\.00 reserved, and the next turn needs up to \$0\.\d{4}; it resets at \d{4}-\d\d-01T00:00:00Z; the run finishes without a last model turn`, result.Reason)
	assert.Contains(t, result.HandoffNote, "Stopped after")
	model.mu.Lock()
	assert.Regexp(t, `ACCOUNT acme: \$0\.\d\d left for turns of its \$1\.00 a month spend cap \(resets \d{4}-\d\d-01 00:00 UTC\); it binds before the run's own budget`, model.last,
		"the model read what the account has left")
	model.mu.Unlock()
	requests, billed := model.billed()
	assert.Equal(t, result.Usage.Steps, requests, "every turn the run counted reached the provider, and no other")
	assert.Greater(t, requests, 1, "the cap let some turns through")
	assert.Zero(t, spendViolations(ctx, t, store, "acme", 1, started, billed))
	assert.Zero(t, spendViolations(ctx, t, store, "acme/support", 1e9, started, 0), "acme/support has no cap: no period")
	stored, err := ledgerdb.Of(store).GetRun(ctx, "spend-finish")
	require.NoError(t, err)
	assert.Equal(t, result.Reason, stored.Reason)
}

// A cap that keeps its last half for finishing turns (a finishing turn
// here may reserve $0.42, more than ordinary turns): once the room
// for ordinary turns is spent, the run finishes with a turn the model
// writes (its partial answer and handoff note), paid from the reserve,
// and the cap is never passed.
func TestSpendCapKeepsRoomForTheFinishingTurn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := startCappedRun(ctx, t, "spend-finish-reserve", "hooli",
		ledger.SpendCap{Account: "hooli", Period: ledger.SpendMonth, USD: 1, FinishReserve: 0.5}, 100)
	var result workflows.RunResult
	require.NoError(t, c.run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunPartial, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "the spend cap of account hooli ($1.00 a month (its last $0.50 kept for finishing turns))")
	assert.Contains(t, result.Reason, "the run finishes with a turn paid from the cap's finishing reserve")
	assert.Equal(t, "some notes", result.Answer, "the model wrote the partial answer")
	assert.Contains(t, result.HandoffNote, "the account ran out")
	requests, billed := c.model.billed()
	assert.Equal(t, result.Usage.Steps, requests)
	assert.Zero(t, spendViolations(ctx, t, c.store, "hooli", 1, c.started, billed))
}

// on_exhausted: escalate. The cap refuses a turn, the run asks a human,
// who raises the cap and resumes it, and the run completes.
func TestSpendCapEscalatesAndAHumanRaisesIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	capped := ledger.SpendCap{Account: "globex", Period: ledger.SpendMonth, USD: 0.6, OnExhausted: agentsagatype.OnExhaustedEscalate}
	c := startCappedRun(ctx, t, "spend-escalate", "globex", capped, 4)
	store, run, model, started := c.store, c.run, c.model, c.started
	escalated := waitForEscalation(ctx, t, store, "spend-escalate")
	assert.Contains(t, escalated.StatusDetail, "the spend cap of account globex ($0.60 a month)")
	assert.Contains(t, escalated.StatusDetail, "agentsaga spend set globex")
	capped.USD = 100
	_, err := store.SetSpendCap(ctx, capped, "bob")
	require.NoError(t, err)
	update, err := temporalClient.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: "spend-escalate", UpdateName: workflows.UpdateResume,
		Args: []any{workflows.ResumeInput{Message: "the cap is raised"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	require.NoError(t, err)
	require.NoError(t, update.Get(ctx, nil))
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "all noted", result.Answer)
	_, billed := model.billed()
	assert.Zero(t, spendViolations(ctx, t, store, "globex", 100, started, billed))
	changes, err := ledgerdb.Of(store).SpendCapChanges(ctx, "globex")
	require.NoError(t, err)
	require.Len(t, changes, 2)
	assert.Equal(t, "bob", changes[1].By)
}

// on_exhausted: wait. A cap of $0.70 a minute pays for a turn or two; the
// run waits on a timer for each minute to reset, sends nothing meanwhile,
// and completes. No minute spent more than its cap.
func TestSpendCapWaitsForTheNextPeriod(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := startCappedRun(ctx, t, "spend-wait", "initech",
		ledger.SpendCap{Account: "initech", Period: ledger.SpendMinute, USD: 0.7, OnExhausted: agentsagatype.OnExhaustedWait}, 3)
	store, run, model, started := c.store, c.run, c.model, c.started
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	waits := 0
	for _, e := range runEvents(ctx, t, "spend-wait", run.GetRunID()) {
		if e.GetTimerStartedEventAttributes() != nil && strings.Contains(string(e.GetUserMetadata().GetSummary().GetData()), "spend cap of initech") {
			waits++
		}
	}
	assert.Positive(t, waits, "the run waited for a minute to reset")
	requests, billed := model.billed()
	assert.Equal(t, 4, requests, "three notes and the answer, each sent once")
	periods, err := ledgerdb.Of(store).SpendPeriods(ctx, "initech", started.Add(-time.Minute))
	require.NoError(t, err)
	assert.Greater(t, len(periods), 1, "the turns spread over more than one minute")
	assert.Zero(t, spendViolations(ctx, t, store, "initech", 0.7, started, billed))
	t.Logf("completed after %s with %d waits for the cap", time.Since(started).Round(time.Second), waits)
}

// A priced tool is charged to the account per attempt, reserved before
// it is sent (prices.tools; issue 31). The model costs next to nothing
// here, and each note $0.25 against a cap of $1.00 in any hour: three
// notes reach the tool, the fourth is refused before it is sent, and the
// run finishes naming the tool and the cap. The tool server counts what
// reached it; the ledger's spend is the notes' and the turns' cost.
func TestAPricedToolIsChargedPerAttemptToItsAccount(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id, account, notePrice, modelPrice = "spend-tool", "umbrella", 0.25, 1.0
	store, queue := defaultBreakerWorker(ctx, t, id)
	started := time.Now()
	_, err := store.SetSpendCap(ctx, ledger.SpendCap{Account: account, Period: ledger.RollingPeriod(time.Hour), USD: 1}, "ann")
	require.NoError(t, err)
	model := &billedModel{stopAfter: 100, price: modelPrice}
	server := model.serve(t)
	t.Cleanup(server.Close)
	reached := 0
	var mu sync.Mutex
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached++
		mu.Unlock()
		fmt.Fprint(w, `{"noted": true}`)
	}))
	t.Cleanup(tool.Close)
	spec := resolvedSpec(t, fmt.Sprintf(`
goal: take notes
budget: {steps: 30, seconds: 300, account: %s}
model: {provider: openai, name: gpt-4o-mini, base_url: %q, max_tokens: 40}
prices:
  models: {gpt-4o-mini: {input_per_million: %v, output_per_million: %[3]v}}
  tools: {note: %v}
tools:
  - name: note
    kind: http
    url: %q
    parameters: {type: object, properties: {index: {type: integer}}, required: [index]}
`, account, server.URL+"/v1", modelPrice, notePrice, tool.URL))
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))

	assert.Equal(t, agentsagatype.RunPartial, result.Status, result.Reason)
	assert.Regexp(t, `^the spend cap of account umbrella \(\$1\.00 in any 1h\) has \$0\.75\d* spent and \$0\.00 reserved, and a call of tool note needs up to \$0\.2500; room frees at .*; the run finishes without a last model turn`, result.Reason)
	mu.Lock()
	assert.Equal(t, 3, reached, "three notes reached the tool; the fourth was refused before it was sent")
	mu.Unlock()
	requests, billed := model.billed()
	assert.Equal(t, 4, requests, "four turns asked for a note")
	assert.Zero(t, spendViolations(ctx, t, store, account, 1, started, billed+3*notePrice))
}

// A priced tool whose account's cap says wait: at $0.25 a note against
// $0.55 in any 10 s (the model's turns cost a few millionths), two notes
// fit a window; the third is refused before
// it is sent, waits on a timer until the window has room, and goes out
// again under its first key. The run completes all four notes. Seen from
// the tool, no 10 s held more than two requests ($0.50): the cap held where
// the money is spent.
func TestAPricedToolWaitsForItsRollingCap(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id, account, notePrice, window = "spend-tool-wait", "stark", 0.25, 10 * time.Second
	store, queue := defaultBreakerWorker(ctx, t, id)
	started := time.Now()
	_, err := store.SetSpendCap(ctx, ledger.SpendCap{Account: account, Period: ledger.RollingPeriod(window), USD: 0.55,
		OnExhausted: agentsagatype.OnExhaustedWait}, "ann")
	require.NoError(t, err)
	model := &billedModel{stopAfter: 4, price: 0.001}
	server := model.serve(t)
	t.Cleanup(server.Close)
	var mu sync.Mutex
	var reached []time.Time
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		reached = append(reached, time.Now())
		mu.Unlock()
		fmt.Fprint(w, `{"noted": true}`)
	}))
	t.Cleanup(tool.Close)
	spec := resolvedSpec(t, fmt.Sprintf(`
goal: take notes
budget: {steps: 30, seconds: 120, account: %s}
model: {provider: openai, name: gpt-4o-mini, base_url: %q, max_tokens: 40}
prices:
  models: {gpt-4o-mini: {input_per_million: 0.001, output_per_million: 0.001}}
  tools: {note: %v}
tools:
  - name: note
    kind: http
    url: %q
    parameters: {type: object, properties: {index: {type: integer}}, required: [index]}
`, account, server.URL+"/v1", notePrice, tool.URL))
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))

	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, reached, 4, "each note reached the tool once")
	violations := 0
	for i := range reached {
		in := 0
		for _, at := range reached {
			if !at.After(reached[i]) && at.After(reached[i].Add(-window)) {
				in++
			}
		}
		if in > 2 {
			violations++
		}
	}
	t.Logf("notes reached the tool at %v after the start; %d windows of %s held more than two; took %s",
		offsets(reached, started), violations, window, time.Since(started).Round(time.Second))
	assert.Zero(t, violations)
	assert.GreaterOrEqual(t, reached[2].Sub(reached[0]), window-time.Second, "the third note waited for the window")
	_, billed := model.billed()
	assert.Zero(t, spendViolations(ctx, t, store, account, 0.55, started, billed+4*notePrice))
}

// offsets are times as seconds after start, for a log line.
func offsets(at []time.Time, start time.Time) []string {
	out := make([]string, len(at))
	for i, t := range at {
		out[i] = fmt.Sprintf("%.1fs", t.Sub(start).Seconds())
	}
	return out
}
