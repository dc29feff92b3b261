package worker_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// recordHistories regenerates the replay corpus: `make record-histories`.
// Never run by accident: the corpus is the contract with runs in flight,
// and a change that alters it must say why in its commit.
var recordHistories = flag.Bool("record-histories", false, "record the replay corpus into workflows/testdata/histories")

// recordOnly limits a recording to the named scenarios (comma-separated),
// so that adding one scenario leaves the others' histories as they were:
// `make record-histories ONLY=failed-together`.
var recordOnly = flag.String("record-histories.only", "", "record only these scenarios (comma-separated names)")

// recordSet records into a set of its own, a directory under the corpus
// (`make record-histories SET=name`): the histories new runs make after a
// change, beside the older ones, which stay as they were.
var recordSet = flag.String("record-histories.set", "", "record into this subdirectory of the corpus")

// corpusDir is where the replay corpus lives, beside the workflow code.
const corpusDir = "../workflows/testdata/histories"

// recorder runs scenarios on the shared dev server and saves each
// execution's history as JSON.
type recorder struct {
	t     *testing.T
	store *ledger.Store
	queue string
	dir   string // where the histories go
	url   string // the payments server
	// refundsBroken makes /refund answer 500 while set.
	refundsBroken atomic.Bool
	// crmDownUntil is when /crm, down since its first request, recovers
	// (unix nanoseconds; 0 before the first request).
	crmDownUntil atomic.Int64
	// fetchDownUntil is the same for /fetch, which one scenario alone
	// calls, on the worker with the default breaker.
	fetchDownUntil atomic.Int64
}

// crmOutage is how long /crm stays down after its first request: long
// enough to open its breaker (breakerQueue's workers) and outlast a probe.
const crmOutage = 3 * time.Second

// breakerQueue's worker opens a breaker after 3 failures and probes every
// second, so that the breaker-open scenario opens one in a few calls.
var breakerConfig = budget.BreakerConfig{Threshold: 3, Window: 30 * time.Second, Cooldown: time.Second}

// scenario is one path the workflow can take.
type scenario struct {
	name string
	spec string
	// act, when set, plays the human or the operator once the run is
	// under way; it returns when it has done its part.
	act func(ctx context.Context, r *recorder, id string)
	// brokenRefunds makes refunds fail until act mends them.
	brokenRefunds bool
	// breakers runs the scenario on the worker whose breakers open after a
	// few failures (breakerConfig).
	breakers bool
	// viaStart starts the run as agentsaga.Start does (the spec resolved,
	// search attributes on, where the namespace has them), not with the
	// parsed spec as it is.
	viaStart bool
	// modelOutage points MODEL_URL in the spec at an OpenAI-compatible
	// model server that is down for its first crmOutage (downModel).
	modelOutage bool
	// rateLimited points MODEL_URL in the spec at an OpenAI-compatible
	// model server that answers its first request 429 (quotaModel).
	rateLimited bool
	// spendCap, when set, is set in the ledger before the run starts, and
	// MODEL_URL points at a model that bills each turn (billedModel) and
	// answers after billedNotes notes.
	spendCap    *ledger.SpendCap
	billedNotes int
	// before, when set, prepares the ledger once the cap is set, before
	// the run starts.
	before func(ctx context.Context, r *recorder)
	// model, when set, starts the run's model server (one per run, closed
	// when the recording ends); MODEL_URL in the spec is its root URL, to
	// which a spec adds the path its provider's base_url takes (/v1 for
	// OpenAI's APIs). A server may fail the test (t.Errorf) on a request
	// its provider would refuse.
	model func(t *testing.T) *httptest.Server
	// want, when set, is the status the ledger must show once the run has
	// ended: a recording of a run that went another way is not the path
	// its name says.
	want string
	// fork, when set, forks the run once act is done (issue 45) and returns
	// the fork, which is what is recorded, as name-fork (the fork's own
	// default ID is corpus-name-fork), and what want is checked against.
	fork func(ctx context.Context, r *recorder, id string) *agentsaga.Run
}

func TestRecordHistories(t *testing.T) {
	if !*recordHistories {
		t.Skip("records the replay corpus only with -record-histories (make record-histories)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := &recorder{t: t, store: ledgertest.NewHandle(t), queue: "record-histories"}
	pay, url := startPayments(t, func(*payments) {})
	r.url = url
	refunds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/refund" && r.refundsBroken.Load() {
			http.Error(w, `{"error":"refunds are down"}`, http.StatusInternalServerError)
			return
		}
		if downUntil := map[string]*atomic.Int64{"/crm": &r.crmDownUntil, "/fetch": &r.fetchDownUntil}[req.URL.Path]; downUntil != nil {
			downUntil.CompareAndSwap(0, time.Now().Add(crmOutage).UnixNano())
			if time.Now().UnixNano() < downUntil.Load() {
				http.Error(w, `{"error":"the service is down"}`, http.StatusServiceUnavailable)
				return
			}
			fmt.Fprint(w, `{"updated": true}`)
			return
		}
		switch req.URL.Path {
		case "/ack": // a write API that acknowledges every write alike
			fmt.Fprint(w, `{"ok": true}`)
			return
		case "/search": // a read-only search that finds nothing
			fmt.Fprint(w, "no results")
			return
		case "/note": // the billed model's note tool
			fmt.Fprint(w, `{"noted": true}`)
			return
		case "/gone": // a service that never comes back
			http.Error(w, `{"error":"the service is down"}`, http.StatusServiceUnavailable)
			return
		}
		if req.URL.Path == "/refund" && strings.HasPrefix(req.Header.Get("Idempotency-Key"), "corpus-failed-together/") {
			http.Error(w, `{"error":"no such charge"}`, http.StatusNotFound)
			return
		}
		pay.ServeHTTP(w, req)
	}))
	defer refunds.Close()
	r.url = refunds.URL
	box := activities.NewToolbox() // the engine adds the built-ins
	box.Register("page", func(_ context.Context, call activities.ToolInvocation) (string, error) {
		return strings.Repeat("page "+string(call.Arguments)+". ", 64), nil
	})
	w, err := worker.New(ctx, temporalClient, r.store, worker.Options{Config: agentsaga.Config{TaskQueue: r.queue, Toolbox: box}})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()
	breakers, err := worker.New(ctx, temporalClient, r.store, worker.Options{Config: agentsaga.Config{TaskQueue: r.queue + "-breakers", Toolbox: box, Breaker: breakerConfig}})
	require.NoError(t, err)
	require.NoError(t, breakers.Start())
	defer breakers.Stop()
	r.dir = filepath.Join(corpusDir, *recordSet)
	require.NoError(t, os.MkdirAll(r.dir, 0o755))
	only := map[string]bool{}
	for _, name := range strings.Split(*recordOnly, ",") {
		if name != "" {
			only[name] = true
		}
	}
	recorded := 0
	for _, sc := range corpusScenarios() {
		if len(only) == 0 || only[sc.name] {
			r.record(ctx, sc)
			recorded++
		}
	}
	require.Positive(t, recorded, "no scenario is named %q", *recordOnly)
}

func (r *recorder) record(ctx context.Context, sc scenario) {
	t := r.t
	text := fmt.Sprintf(sc.spec, r.url)
	if sc.modelOutage {
		var model downModel
		server := model.serve(crmOutage)
		defer server.Close()
		text = strings.ReplaceAll(text, "MODEL_URL", server.URL+"/v1")
	}
	if sc.spendCap != nil {
		_, err := r.store.SetSpendCap(ctx, *sc.spendCap, "corpus")
		require.NoError(t, err, sc.name)
		model := &billedModel{stopAfter: sc.billedNotes}
		server := model.serve(t)
		defer server.Close()
		text = strings.ReplaceAll(text, "MODEL_URL", server.URL+"/v1")
	}
	if sc.rateLimited {
		model := &quotaModel{tooMany: func(n int32) bool { return n == 1 }}
		server := model.serve()
		defer server.Close()
		text = strings.ReplaceAll(text, "MODEL_URL", server.URL+"/v1")
	}
	if sc.model != nil {
		server := sc.model(t)
		defer server.Close()
		text = strings.ReplaceAll(text, "MODEL_URL", server.URL)
	}
	if sc.before != nil {
		sc.before(ctx, r)
	}
	spec, err := workflows.ParseSpec([]byte(text))
	require.NoError(t, err, sc.name)
	id := "corpus-" + sc.name
	r.refundsBroken.Store(sc.brokenRefunds)
	queue := r.queue
	if sc.breakers {
		queue += "-breakers"
	}
	var first string
	if sc.viaStart {
		run, err := agentsaga.Start(ctx, temporalClient, id, spec, agentsaga.StartOptions{TaskQueue: queue, Ledger: r.store})
		require.NoError(t, err, sc.name)
		first = run.RunID
	} else {
		run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
		require.NoError(t, err, sc.name)
		first = run.GetRunID()
	}
	if sc.act != nil {
		sc.act(ctx, r, id)
	}
	name := sc.name
	if sc.fork != nil {
		fork := sc.fork(ctx, r, id)
		name, id, first = sc.name+"-fork", fork.ID, fork.RunID
	}
	_ = temporalClient.GetWorkflow(ctx, id, "").Get(ctx, nil) // how it ended is in its history
	if sc.want != "" {
		run, err := ledgerdb.Of(r.store).GetRun(ctx, id)
		require.NoError(t, err, sc.name)
		require.Equal(t, sc.want, run.Status, "%s: %s", sc.name, run.StatusDetail)
	}
	r.save(ctx, name, id, first)
}

// save writes the chain of executions that began with runID: name.json,
// then name.2.json and on for each continue-as-new.
func (r *recorder) save(ctx context.Context, name, id, runID string) {
	for n := 1; runID != ""; n++ {
		var history historypb.History
		next := ""
		iter := temporalClient.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			event, err := iter.Next()
			require.NoError(r.t, err)
			history.Events = append(history.Events, event)
			if attrs := event.GetWorkflowExecutionContinuedAsNewEventAttributes(); attrs != nil {
				next = attrs.GetNewExecutionRunId()
			}
		}
		data, err := protojson.MarshalOptions{Indent: " "}.Marshal(&history)
		require.NoError(r.t, err)
		file := name + ".json"
		if n > 1 {
			file = fmt.Sprintf("%s.%d.json", name, n)
		}
		require.NoError(r.t, os.WriteFile(filepath.Join(r.dir, file), data, 0o644))
		r.t.Logf("recorded %s: %d events", file, len(history.Events))
		runID = next
	}
}

// waitStatus waits until the ledger says the run is status.
func (r *recorder) waitStatus(ctx context.Context, id, status string) {
	for {
		run, err := ledgerdb.Of(r.store).GetRun(ctx, id)
		if err == nil && run.Status == status {
			return
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("%s never became %s", id, status)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// update sends a human's Update and waits for it to complete.
func (r *recorder) update(ctx context.Context, id, name string, args ...any) {
	handle, err := temporalClient.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: name,
		Args: args, WaitForStage: client.WorkflowUpdateStageCompleted})
	require.NoError(r.t, err)
	require.NoError(r.t, handle.Get(ctx, nil), "%s on %s", name, id)
}

const corpusTools = `
tools:
  - name: charge
    kind: http
    url: %[1]s/charge
    timeout_seconds: 3
    parameters: {type: object, properties: {customer: {type: string}, amount: {type: number}}, required: [customer, amount]}
    compensate:
      tool: refund
      arguments: {charge_id: "{{result.id}}", customer: "{{args.customer}}"}
  - name: refund
    kind: http
    url: %[1]s/refund
    timeout_seconds: 3
  - {name: page, kind: go, parameters: {type: object, properties: {page: {type: number}}, required: [page]}}
  - {name: helper, kind: agent}
  - name: crm
    kind: http
    url: %[1]s/crm
    timeout_seconds: 3
  - name: fetch
    kind: http
    url: %[1]s/fetch
    timeout_seconds: 3
  - name: stock
    kind: http
    url: %[1]s/ack
    timeout_seconds: 3
    parameters: {type: object, properties: {item: {type: integer}}, required: [item]}
  - name: search
    kind: http
    url: %[1]s/search
    timeout_seconds: 3
    read_only: true
    parameters: {type: object, properties: {query: {type: string}}, required: [query]}
  - name: archive
    kind: http
    url: %[1]s/gone
    timeout_seconds: 3
  - name: note
    kind: http
    url: %[1]s/note
    timeout_seconds: 3
    parameters: {type: object, properties: {index: {type: integer}}, required: [index]}
agents:
  helper: {tools: [page], share: 0.5}
`

// approvalTools are corpusTools with a gated charge (issue 24): approval
// past 100, never more than 1,000 a call, 300 in a run.
var approvalTools = strings.Replace(corpusTools, `      arguments: {charge_id: "{{result.id}}", customer: "{{args.customer}}"}
`, `      arguments: {charge_id: "{{result.id}}", customer: "{{args.customer}}"}
    approval: {when: "amount > 100", timeout_seconds: 2}
    limits: [{call: "amount <= 1000"}, {run_sum: amount, at_most: 300}]
`, 1)

// deadlineTools are corpusTools whose charge past 100 waits 2s for
// approval, reminding after 1s, and then does what more says
// (agentsaga-commands 10).
func deadlineTools(more string) string {
	return strings.Replace(corpusTools, `      arguments: {charge_id: "{{result.id}}", customer: "{{args.customer}}"}
`, `      arguments: {charge_id: "{{result.id}}", customer: "{{args.customer}}"}
    approval: {when: "amount > 100", timeout: 2s, remind_every: 1s`+more+`}
`, 1)
}

// decideApproval waits for the run's call waiting for approval and sends
// the decision (workflows.UpdateApprove or UpdateDeny).
func (r *recorder) decideApproval(ctx context.Context, id, decision string) {
	for {
		value, err := temporalClient.QueryWorkflow(ctx, id, "", workflows.QueryApprovals)
		var waiting []workflows.ApprovalWait
		if err == nil && value.Get(&waiting) == nil && len(waiting) > 0 && waiting[0].Decision == nil {
			r.update(ctx, id, decision, workflows.ApprovalInput{Call: waiting[0].Call, By: "corpus", Reason: "corpus: " + decision})
			return
		}
		select {
		case <-ctx.Done():
			r.t.Fatalf("%s never waited for approval", id)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func pagesScript(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "    - tool_calls: [{name: page, arguments: {page: %d}}]\n", i)
	}
	return b.String()
}

// corpusScenarios are the paths the replay corpus covers: one recorded
// history (or chain of them) per way a run can go.
func corpusScenarios() []scenario {
	charge := "    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]\n"
	refuse := "    - refusal: I need a human's go-ahead\n"
	resume := func(ctx context.Context, r *recorder, id string) {
		r.waitStatus(ctx, id, agentsagatype.RunEscalated)
		r.update(ctx, id, workflows.UpdateResume, workflows.ResumeInput{Message: "go ahead", AddSteps: 1})
	}
	abort := func(ctx context.Context, r *recorder, id string) {
		r.waitStatus(ctx, id, agentsagatype.RunEscalated)
		r.update(ctx, id, workflows.UpdateAbort, workflows.ReasonInput{Reason: "corpus: stop"})
	}
	failingRefund := func(decision string) func(ctx context.Context, r *recorder, id string) {
		return func(ctx context.Context, r *recorder, id string) {
			r.waitStatus(ctx, id, agentsagatype.RunNeedsAttention)
			r.refundsBroken.Store(false)
			if decision == workflows.UpdateSkip {
				r.update(ctx, id, workflows.UpdateSkip, workflows.ReasonInput{Reason: "corpus: refunded by hand"})
				return
			}
			r.update(ctx, id, workflows.UpdateRetry)
		}
	}
	big := "    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 200}}]\n"
	// forkQueued forks a run charged to account, whose one place
	// (max_concurrent_runs 1) a second run of the account takes when the
	// source gives it back: the fork waits queued, and is then let in (the
	// second run aborted) or taken out of the queue. No admission loop
	// runs beside the recorder, so each run is told by hand.
	forkQueued := func(account, then string) func(ctx context.Context, r *recorder, id string) *agentsaga.Run {
		return func(ctx context.Context, r *recorder, id string) *agentsaga.Run {
			r.waitStatus(ctx, id, agentsagatype.RunEscalated)
			parse := func(script string) workflows.RunSpec {
				spec, err := workflows.ParseSpec([]byte(fmt.Sprintf("goal: charge ann, then ask\nbudget: {steps: 4, account: "+account+
					"}\nmodel:\n  provider: scripted\n  script:\n"+script+corpusTools, r.url)))
				require.NoError(r.t, err)
				return spec
			}
			holder := id + "-holder"
			_, err := agentsaga.Start(ctx, temporalClient, holder, parse(refuse), agentsaga.StartOptions{TaskQueue: r.queue, Ledger: r.store})
			require.NoError(r.t, err)
			r.waitStatus(ctx, holder, agentsagatype.RunQueued)
			spec := parse(charge + "    - content: charged\n")
			fork, err := agentsaga.Get(temporalClient, id).WithLedger(r.store).Fork(ctx, agentsaga.ForkOptions{At: agentsaga.ForkAtFailed,
				Spec: &spec, Message: "corpus: ann is fine", Start: agentsaga.StartOptions{TaskQueue: r.queue}})
			require.NoError(r.t, err)
			require.NoError(r.t, temporalClient.SignalWorkflow(ctx, holder, "", wire.SignalAdmitted, nil))
			r.waitStatus(ctx, holder, agentsagatype.RunEscalated)
			r.waitStatus(ctx, fork.ID, agentsagatype.RunQueued)
			if then == "cancel" {
				require.NoError(r.t, ledgerdb.Of(r.store).CancelQueued(ctx, fork.ID))
			} else {
				r.update(ctx, holder, workflows.UpdateAbort, workflows.ReasonInput{Reason: "corpus: the fork goes first"})
				r.waitStatus(ctx, holder, agentsagatype.RunCompensated)
			}
			require.NoError(r.t, temporalClient.SignalWorkflow(ctx, fork.ID, "", wire.SignalAdmitted, nil))
			return fork
		}
	}
	accountOfOne := func(account string) func(context.Context, *recorder) {
		return func(ctx context.Context, r *recorder) {
			require.NoError(r.t, ledgerdb.Of(r.store).SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: account, MaxConcurrentRuns: 1}, "corpus"))
		}
	}
	gated := "budget: {steps: 6}\nmodel:\n  provider: scripted\n  script:\n"
	return []scenario{
		{name: "approval-approved", spec: "goal: charge ann\n" + gated + charge + big + "    - content: charged\n" + approvalTools,
			act: func(ctx context.Context, r *recorder, id string) { r.decideApproval(ctx, id, workflows.UpdateApprove) }},
		{name: "approval-denied", spec: "goal: charge ann\n" + gated + big + big + "    - content: not charged\n" + approvalTools,
			act: func(ctx context.Context, r *recorder, id string) { r.decideApproval(ctx, id, workflows.UpdateDeny) }},
		{name: "approval-timeout-escalated", spec: "goal: charge ann\n" + gated + big + big + "    - content: charged late\n" + approvalTools,
			act: func(ctx context.Context, r *recorder, id string) {
				r.waitStatus(ctx, id, agentsagatype.RunEscalated)
				r.decideApproval(ctx, id, workflows.UpdateApprove)
				r.update(ctx, id, workflows.UpdateResume, workflows.ResumeInput{Message: "approved: go ahead"})
			}},
		{name: "limits-refused", spec: "goal: charge ann\n" + gated +
			"    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 5000}}]\n" +
			"    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 100}}, {name: charge, arguments: {customer: bob, amount: 100}}, {name: charge, arguments: {customer: cy, amount: 100}}, {name: charge, arguments: {customer: di, amount: 100}}]\n" +
			"    - content: charged what the limits allow\n" + approvalTools},
		{name: "completed", spec: "goal: charge ann\nbudget: {steps: 4}\nmodel:\n  provider: scripted\n  script:\n" + charge + "    - content: charged\n" + corpusTools},
		{name: "partial-graceful-finish", spec: "goal: read\nbudget: {steps: 4}\nfinish_at: 0.5\nmodel:\n  provider: scripted\n  script:\n" + pagesScript(1, 4) + corpusTools},
		{name: "partial-watchdog", spec: "goal: read\nbudget: {steps: 8}\nmodel:\n  provider: scripted\n  script:\n" +
			strings.Repeat("    - tool_calls: [{name: page, arguments: {page: 1}}]\n", 6) + corpusTools},
		{name: "escalated-resumed", spec: "goal: charge ann\nbudget: {steps: 5}\nmodel:\n  provider: scripted\n  script:\n" + charge + refuse + "    - content: charged\n" + corpusTools, act: resume},
		{name: "escalated-aborted", spec: "goal: charge ann\nbudget: {steps: 5}\nmodel:\n  provider: scripted\n  script:\n" + charge + refuse + corpusTools, act: abort},
		{name: "compensated", spec: "goal: charge, then fail\nbudget: {steps: 5}\nmodel:\n  provider: scripted\n  script:\n" + charge + corpusTools},
		{name: "needs-attention-retry", spec: "goal: charge, then fail\nbudget: {steps: 5}\ncompensation_attempts: 1\nmodel:\n  provider: scripted\n  script:\n" + charge + corpusTools,
			act: failingRefund(workflows.UpdateRetry), brokenRefunds: true},
		{name: "needs-attention-skip", spec: "goal: charge, then fail\nbudget: {steps: 5}\ncompensation_attempts: 1\nmodel:\n  provider: scripted\n  script:\n" + charge + corpusTools,
			act: failingRefund(workflows.UpdateSkip), brokenRefunds: true},
		// Two calls of one turn fail together: each is given up (its key
		// fenced) before the model hears of it.
		{name: "failed-together", spec: "goal: refund two charges\nbudget: {steps: 4}\nmodel:\n  provider: scripted\n  script:\n" +
			"    - tool_calls: [{name: refund, arguments: {charge_id: ch_x, customer: ann}}, {name: refund, arguments: {charge_id: ch_y, customer: bob}}]\n" +
			"    - content: there was nothing to refund\n" + corpusTools},
		{name: "sub-agents", spec: "goal: delegate\nbudget: {steps: 8}\nmodel:\n  provider: scripted\n  script:\n" +
			"    - tool_calls: [{name: helper, arguments: {task: read page 1}}]\n    - content: delegated\n" + corpusTools},
		{name: "cancelled", spec: "goal: charge ann\nbudget: {steps: 5}\nmodel:\n  provider: scripted\n  script:\n" + charge + refuse + corpusTools,
			act: func(ctx context.Context, r *recorder, id string) {
				r.waitStatus(ctx, id, agentsagatype.RunEscalated)
				require.NoError(r.t, temporalClient.CancelWorkflow(ctx, id, ""))
			}},
		// Three calls to a CRM that is down for a few seconds open its
		// breaker. Before park-on-open-breaker the run escalated at the
		// first refusal, and a human resumed it; since, the refused calls
		// wait for the breaker and the run completes on its own.
		// Started as `agentsaga run` starts it, with the search attributes
		// the UI lists runs by: the upserts that keep them are commands.
		// Issue 45: a run charges ann and escalates at step 2; its fork from
		// step 2 starts with the conversation up to it (no model call for
		// step 1) and fails there (its script has no second turn), and its
		// walk refunds the charge it inherited. A fork emits what a
		// continued execution does, so it needed no version change.
		{name: "forked-then-failed", viaStart: true, want: agentsagatype.RunCompensated,
			spec: "goal: charge ann, then ask\nbudget: {steps: 4}\nmodel:\n  provider: scripted\n  script:\n" + charge + refuse + corpusTools,
			fork: func(ctx context.Context, r *recorder, id string) *agentsaga.Run {
				r.waitStatus(ctx, id, agentsagatype.RunEscalated)
				spec, err := workflows.ParseSpec([]byte(fmt.Sprintf("goal: charge ann, then ask\nbudget: {steps: 4}\nmodel:\n  provider: scripted\n  script:\n"+
					charge+corpusTools, r.url)))
				require.NoError(r.t, err)
				fork, err := agentsaga.Get(temporalClient, id).WithLedger(r.store).Fork(ctx, agentsaga.ForkOptions{At: agentsaga.ForkAtFailed,
					Spec: &spec, Message: "corpus: ann is fine", Start: agentsaga.StartOptions{TaskQueue: r.queue}})
				require.NoError(r.t, err)
				return fork
			}},
		// agentsaga-commands 11: a fork charged to an account is admitted
		// before its first live turn. Both forks wait queued behind the
		// account's one place; the first is let in and completes, the
		// second is taken out of the queue and refunds the charge it
		// inherited.
		{name: "fork-admitted", viaStart: true, want: agentsagatype.RunCompleted, before: accountOfOne("corpus-fork-admitted"),
			spec: "goal: charge ann, then ask\nbudget: {steps: 4, account: corpus-fork-admitted}\nmodel:\n  provider: scripted\n  script:\n" +
				charge + refuse + corpusTools,
			fork: forkQueued("corpus-fork-admitted", "admit")},
		{name: "fork-cancelled", viaStart: true, want: agentsagatype.RunCompensated, before: accountOfOne("corpus-fork-cancelled"),
			spec: "goal: charge ann, then ask\nbudget: {steps: 4, account: corpus-fork-cancelled}\nmodel:\n  provider: scripted\n  script:\n" +
				charge + refuse + corpusTools,
			fork: forkQueued("corpus-fork-cancelled", "cancel")},
		{name: "search-attributes", viaStart: true, spec: "goal: charge ann, then read\nbudget: {steps: 4}\nmodel:\n  provider: scripted\n  script:\n" +
			charge + "    - tool_calls: [{name: page, arguments: {page: 1}}]\n    - content: charged and read\n" + corpusTools},
		// The model provider is down for a few seconds: its breaker opens
		// on the turn's third failure. Before agentsaga-commands 1 the run
		// failed; since, the turn waits for the breaker and the run
		// completes.
		{name: "model-outage", breakers: true, modelOutage: true,
			spec: "goal: answer\nbudget: {steps: 4}\nmodel: {provider: openai, name: gpt-4o-mini, base_url: MODEL_URL}\n" + corpusTools},
		{name: "breaker-open", breakers: true, spec: "goal: update the CRM\nbudget: {steps: 5}\nmodel:\n  provider: scripted\n  script:\n" +
			"    - tool_calls: [{name: crm, arguments: {field: a}}, {name: crm, arguments: {field: b}}, {name: crm, arguments: {field: c}}]\n" +
			"    - content: updated\n" + corpusTools,
			act: func(ctx context.Context, r *recorder, id string) {
				for {
					run, err := ledgerdb.Of(r.store).GetRun(ctx, id)
					if err == nil && run.Status == agentsagatype.RunEscalated {
						r.update(ctx, id, workflows.UpdateResume, workflows.ResumeInput{Message: "the CRM is back", AddSteps: 1})
						return
					}
					if err == nil && run.Status != agentsagatype.RunRunning {
						return
					}
					select {
					case <-ctx.Done():
						r.t.Fatalf("%s never escalated or ended", id)
					case <-time.After(50 * time.Millisecond):
					}
				}
			}},
		// One run alone meets a tool that is down for a few seconds, on a
		// worker with the default breaker: its call's three attempts fail,
		// the third opens the breaker (three in a row: down), and the call
		// waits for it instead of failing. Before agentsaga-commands 2 the
		// hook failed such a call on its attempt cap.
		{name: "tool-down-waits", spec: "goal: fetch two items\nbudget: {steps: 4}\nretry: {max_attempts: 3, ratio: 0.2, floor: 5}\nmodel:\n  provider: scripted\n  script:\n" +
			"    - tool_calls: [{name: fetch, arguments: {item: 1}}]\n    - tool_calls: [{name: fetch, arguments: {item: 2}}]\n    - content: fetched\n" + corpusTools},
		// The model provider is down for a few seconds and the spec names a
		// fallback: the turn its open breaker refuses goes to the fallback
		// at once (model.fallbacks, agentsaga-commands 2).
		{name: "model-fallback", breakers: true, modelOutage: true,
			spec: "goal: answer\nbudget: {steps: 4}\nmodel:\n  provider: openai\n  name: gpt-4o-mini\n  base_url: MODEL_URL\n" +
				"  fallbacks: [{provider: scripted, script: [{content: answered by the fallback}]}]\n" + corpusTools},
		// The model's provider answers the first request 429: the turn
		// waits for the quota on a timer and goes out again under its
		// first key (agentsaga-commands 3), where it used to retry.
		{name: "model-quota-waits", rateLimited: true,
			spec: "goal: answer\nbudget: {steps: 4}\nmodel: {provider: openai, name: gpt-4o-mini, base_url: MODEL_URL}\n" + corpusTools},
		// Six writes, each acknowledged with the same {"ok": true}: since
		// agentsaga-commands 5 each is progress (a new call of a tool that
		// is not read_only succeeded) and the run completes, where the
		// watchdog stopped it after the fourth as "nothing new".
		{name: "writes-acknowledged", spec: "goal: restock six items\nbudget: {steps: 8}\nmodel:\n  provider: scripted\n  script:\n" +
			itemsScript("stock", 6) + "    - content: restocked\n" + corpusTools},
		// Six new queries to a read_only search that finds nothing: the
		// watchdog stops the run after three turns of nothing new, and
		// names the rule (agentsaga-commands 5).
		{name: "read-only-watchdog", spec: "goal: find a supplier\nbudget: {steps: 8}\nmodel:\n  provider: scripted\n  script:\n" +
			searchesScript(6) + "    - content: found nothing\n" + corpusTools},
		// The archive stays down: its call cannot afford a wait behind the
		// open breaker within the wall clock, the run escalates, nobody
		// answers, and the deadline passes. Since agentsaga-commands 6 the
		// reason names what the wall clock went to (the archive, and the
		// escalation).
		{name: "tool-down-wall-clock", spec: "goal: archive the log\nbudget: {steps: 4, seconds: 8}\nfinish_at: 0.5\n" +
			"retry: {max_attempts: 3, ratio: 0.2, floor: 5}\nmodel:\n  provider: scripted\n  script:\n" +
			"    - tool_calls: [{name: archive, arguments: {log: today}}]\n    - content: archived\n" + corpusTools},
		// Runs charged to an account whose spend cap binds
		// (agentsaga-commands 7): the turn the cap cannot pay for is not
		// sent, and the run finishes, escalates (a human raises the cap
		// and resumes it) or waits for the minute to reset.
		{name: "spend-cap-finish", spec: billedSpec("corpus-acme"), billedNotes: 20,
			spendCap: &ledger.SpendCap{Account: "corpus-acme", Period: ledger.SpendMonth, USD: 1}},
		{name: "spend-cap-finish-reserve", spec: billedSpec("corpus-hooli"), billedNotes: 20,
			spendCap: &ledger.SpendCap{Account: "corpus-hooli", Period: ledger.SpendMonth, USD: 1, FinishReserve: 0.5}},
		{name: "spend-cap-escalated", spec: billedSpec("corpus-globex"), billedNotes: 4,
			spendCap: &ledger.SpendCap{Account: "corpus-globex", Period: ledger.SpendMonth, USD: 0.6, OnExhausted: agentsagatype.OnExhaustedEscalate},
			act: func(ctx context.Context, r *recorder, id string) {
				r.waitStatus(ctx, id, agentsagatype.RunEscalated)
				_, err := r.store.SetSpendCap(ctx, ledger.SpendCap{Account: "corpus-globex", Period: ledger.SpendMonth, USD: 100,
					OnExhausted: agentsagatype.OnExhaustedEscalate}, "corpus")
				require.NoError(r.t, err)
				r.update(ctx, id, workflows.UpdateResume, workflows.ResumeInput{Message: "the cap is raised"})
			}},
		{name: "spend-cap-waits", spec: billedSpec("corpus-initech"), billedNotes: 3,
			spendCap: &ledger.SpendCap{Account: "corpus-initech", Period: ledger.SpendMinute, USD: 0.7, OnExhausted: agentsagatype.OnExhaustedWait}},
		// A priced tool charged to the account per attempt
		// (agentsaga-commands 8): three notes at $0.25 fit a cap of $1.00
		// in any hour, the fourth is refused before it is sent, and the
		// run finishes naming the tool and the cap.
		{name: "spend-cap-tool", billedNotes: 20,
			spec: strings.Replace(strings.Replace(billedSpec("corpus-umbrella"), fmt.Sprint(spendPrice), "1", 2),
				"}}}\n", "}}, tools: {note: 0.25}}\n", 1),
			spendCap: &ledger.SpendCap{Account: "corpus-umbrella", Period: ledger.RollingPeriod(time.Hour), USD: 1}},
		// Admission by run (agentsaga-commands 9, issue 43): a run charged
		// to a capped account asks the ledger to admit it whole before its
		// first turn. Admitted at once, it goes on as before; one the cap
		// cannot hold waits queued (the ledger's answer, a recheck timer)
		// until the admission loop's signal, after an operator raised the
		// cap, admits it; or until an operator takes it out of the queue,
		// and it fails without a turn.
		{name: "admission-admitted", want: agentsagatype.RunCompleted, billedNotes: 2,
			spec:     admissionSpec("corpus-acme-admitted"),
			spendCap: &ledger.SpendCap{Account: "corpus-acme-admitted", Period: ledger.SpendMonth, USD: 10}},
		{name: "admission-queued", want: agentsagatype.RunCompleted, billedNotes: 2,
			spec:     admissionSpec("corpus-acme-queued"),
			spendCap: &ledger.SpendCap{Account: "corpus-acme-queued", Period: ledger.SpendMonth, USD: 1},
			before:   spendEarlier("corpus-acme-queued", 0.9),
			act: func(ctx context.Context, r *recorder, id string) {
				r.waitStatus(ctx, id, agentsagatype.RunQueued)
				_, err := r.store.SetSpendCap(ctx, ledger.SpendCap{Account: "corpus-acme-queued", Period: ledger.SpendMonth, USD: 10}, "corpus")
				require.NoError(r.t, err)
			}},
		{name: "admission-cancelled", want: agentsagatype.RunFailed, billedNotes: 2,
			spec:     admissionSpec("corpus-acme-cancelled"),
			spendCap: &ledger.SpendCap{Account: "corpus-acme-cancelled", Period: ledger.SpendMonth, USD: 1},
			before:   spendEarlier("corpus-acme-cancelled", 0.9),
			act: func(ctx context.Context, r *recorder, id string) {
				r.waitStatus(ctx, id, agentsagatype.RunQueued)
				require.NoError(r.t, ledgerdb.Of(r.store).CancelQueued(ctx, id))
				require.NoError(r.t, temporalClient.SignalWorkflow(ctx, id, "", wire.SignalAdmitted, nil))
			}},
		// Models that keep their reasoning (issue 42), each on a loopback
		// server of its provider's wire format that answers turn 1 with
		// reasoning and a tool call and refuses turn 2 (400) unless the
		// reasoning comes back intact: it lives in the ledger's
		// conversation, never in history, so these runs' commands are
		// those of any tool-calling run; the corpus pins that.
		// Anthropic's extended thinking: a thinking block and its
		// signature before a tool_use.
		{name: "thinking-tool-use", model: thinkingModel, want: agentsagatype.RunCompleted,
			spec: "goal: charge ann\nbudget: {steps: 4}\n" +
				"model: {provider: anthropic, name: claude-sonnet-4-5, base_url: MODEL_URL, max_tokens: 4096, thinking: {budget_tokens: 2048}}\n" + corpusTools},
		// OpenAI's Responses API: a reasoning item with encrypted_content
		// before a function_call (store false).
		{name: "reasoning-items", model: reasoningModel, want: agentsagatype.RunCompleted,
			spec: "goal: find a supplier of oak\nbudget: {steps: 4}\n" +
				"model: {provider: openai-responses, name: o4-mini, base_url: MODEL_URL/v1, max_tokens: 2048, reasoning: {effort: high}}\n" + corpusTools},
		// Gemini's native API: a functionCall part with its
		// thoughtSignature.
		{name: "thought-signatures", model: signatureModel, want: agentsagatype.RunCompleted,
			spec: "goal: restock item 7\nbudget: {steps: 4}\n" +
				"model: {provider: gemini, name: gemini-2.5-flash, base_url: MODEL_URL, api_key_env: " + corpusGeminiKeyEnv + ", thinking: {budget_tokens: 1024}}\n" + corpusTools},
		// The model's URL answers 200 with an HTML page (a proxy's sign-in):
		// a ProtocolMismatch, not retried, on which the run escalates at
		// once; a human aborts it.
		{name: "protocol-mismatch-escalated", model: htmlModel, want: agentsagatype.RunCompensated,
			spec: "goal: answer\nbudget: {steps: 4}\nmodel: {provider: openai, name: proxied-model, base_url: MODEL_URL/v1}\n" + corpusTools,
			act: func(ctx context.Context, r *recorder, id string) {
				r.waitStatus(ctx, id, agentsagatype.RunEscalated)
				run, err := ledgerdb.Of(r.store).GetRun(ctx, id)
				require.NoError(r.t, err)
				require.Contains(r.t, run.StatusDetail, "does not speak its API")
				r.update(ctx, id, workflows.UpdateAbort, workflows.ReasonInput{Reason: "corpus: the base_url is a proxy's sign-in page"})
			}},
		// Deadlines on the waits for a person (agentsaga-commands 10,
		// issue 44): nobody decides on the charge of 200 within its 2s,
		// the wait reminds after 1s, and the call is denied by default;
		// with on_timeout abort the run compensates the charge of 10 it
		// made before; an escalation nobody answers within 2s resumes
		// after a reminder, and the run completes.
		{name: "approval-timeout-denied", want: agentsagatype.RunCompleted,
			spec: "goal: charge ann\n" + gated + big + "    - content: not charged\n" + deadlineTools("")},
		{name: "approval-timeout-aborted", want: agentsagatype.RunCompensated,
			spec: "goal: charge ann\n" + gated + charge + big + "    - content: never\n" + deadlineTools(", on_timeout: abort")},
		{name: "escalation-timeout-resumed", want: agentsagatype.RunCompleted,
			spec: "goal: charge ann\nbudget: {steps: 5}\nescalate: {timeout: 2s, on_timeout: resume, remind_every: 1s}\nmodel:\n  provider: scripted\n  script:\n" +
				charge + refuse + "    - content: charged\n" + corpusTools},
		{name: "continued-as-new", spec: "goal: read\nbudget: {steps: 20}\nhistory: {max_events: 100}\nmodel:\n  provider: scripted\n  script:\n" +
			pagesScript(1, 14) + "    - content: read them\n" + corpusTools},
		{name: "terminated", spec: "goal: charge ann\nbudget: {steps: 5}\nmodel:\n  provider: scripted\n  script:\n" + charge + refuse + corpusTools,
			act: func(ctx context.Context, r *recorder, id string) {
				r.waitStatus(ctx, id, agentsagatype.RunEscalated)
				require.NoError(r.t, temporalClient.TerminateWorkflow(ctx, id, "", "corpus: pulled the plug"))
				marked, err := ledgerdb.Of(r.store).MarkTerminated(ctx, id, "terminated: corpus: pulled the plug")
				require.NoError(r.t, err)
				require.True(r.t, marked)
				rollback, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: r.queue},
					workflows.RollbackRun, wire.RollbackRequest{Reason: "terminated: corpus: pulled the plug"})
				require.NoError(r.t, err)
				require.NoError(r.t, rollback.Get(ctx, nil))
				r.save(ctx, "terminated.rollback", id, rollback.GetRunID())
			}},
	}
}

// itemsScript is a script that calls tool for items 1..n, one a turn.
func itemsScript(tool string, n int) string {
	var script strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&script, "    - tool_calls: [{name: %s, arguments: {item: %d}}]\n", tool, i)
	}
	return script.String()
}

// searchesScript is a script that searches for n different queries, one a
// turn.
func searchesScript(n int) string {
	var script strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&script, "    - tool_calls: [{name: search, arguments: {query: \"supplier %d\"}}]\n", i)
	}
	return script.String()
}

// billedSpec is a run charged to account, on the billed model (MODEL_URL),
// with the note tool, priced so that a turn costs cents.
func billedSpec(account string) string {
	return fmt.Sprintf("goal: take notes\nbudget: {steps: 12, seconds: 300, account: %s}\n"+
		"model: {provider: openai, name: gpt-4o-mini, base_url: MODEL_URL, max_tokens: 40}\n"+
		"prices: {models: {gpt-4o-mini: {input_per_million: %[2]v, output_per_million: %[2]v}}}\n", account, spendPrice) + corpusTools
}

// admissionSpec is billedSpec with a budget.usd of $2: the estimate
// admitting the run reserves.
func admissionSpec(account string) string {
	return strings.Replace(billedSpec(account), "account: "+account+"}", "account: "+account+", usd: 2}", 1)
}

// spendEarlier spends usd of account's cap before the run starts, as
// runs before it did: what is left cannot hold the run's estimate.
func spendEarlier(account string, usd float64) func(context.Context, *recorder) {
	return func(ctx context.Context, r *recorder) {
		key := "corpus-earlier-" + account + "/step-001-model"
		res, err := ledgerdb.Of(r.store).ReserveSpend(ctx, key, account, usd, time.Minute)
		require.NoError(r.t, err)
		require.True(r.t, res.Admitted)
		_, err = ledgerdb.Of(r.store).SettleSpend(ctx, key, usd)
		require.NoError(r.t, err)
	}
}
