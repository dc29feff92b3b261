package agentsaga_test

// Forks (issue 45) on the dev server: a run forked from a step inherits
// the effects made before it, and each effect is done once and undone at
// most once, by the run that owns it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// till is a payment desk: charges and their refunds, by the key each was
// sent under, and the lookups that read.
type till struct {
	mu      sync.Mutex
	charged []string
	refunds []string
	lookups int
}

func (d *till) counts() (charged, refunds []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.charged...), append([]string(nil), d.refunds...)
}

func (d *till) tools(t *testing.T) []agentsaga.Tool {
	t.Helper()
	charge := agentsaga.MustTool(agentsaga.NewTool("charge", "Charge an order.", func(ctx context.Context, args moneyArgs) (string, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.charged = append(d.charged, agentsaga.CallKey(ctx))
		return "charged " + args.Order, nil
	}, agentsaga.WithCompensation("refund_charge", map[string]string{"order": "{{args.order}}"})))
	refund := agentsaga.MustTool(agentsaga.NewTool("refund_charge", "Refund a charge.", func(ctx context.Context, args orderArgs) (string, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.refunds = append(d.refunds, agentsaga.CallKey(ctx))
		return "refunded " + args.Order, nil
	}))
	lookup := agentsaga.MustTool(agentsaga.NewTool("lookup", "Look an order up.", func(_ context.Context, args orderArgs) (string, error) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.lookups++
		return "order " + args.Order + ": 10 EUR", nil
	}, agentsaga.ReadOnly()))
	return []agentsaga.Tool{charge, refund, lookup}
}

// startSource starts spec on an engine worker of its own and waits until
// the run escalates.
func startSource(ctx context.Context, t *testing.T, tools []agentsaga.Tool, spec agentsaga.RunSpec) (*agentsaga.Run, *agentsaga.Engine, *ledger.Store) {
	t.Helper()
	engine, store := startEngineWorker(t, agentsaga.Config{Tools: tools}, nil)
	run, err := agentsaga.Start(ctx, devServer.Client(), agentsagatest.RunID(t), spec, agentsaga.StartOptions{TaskQueue: engine.TaskQueue(), Ledger: store})
	require.NoError(t, err)
	waitForStatus(t, run, agentsagatype.RunEscalated)
	return run, engine, store
}

// forkedFrom is the run's AgentForkedFrom search attribute, "" unset.
func forkedFrom(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	resp, err := devServer.Client().DescribeWorkflowExecution(ctx, id, "")
	require.NoError(t, err)
	payload, ok := resp.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()["AgentForkedFrom"]
	if !ok {
		return ""
	}
	var source string
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(payload, &source))
	return source
}

// modelTurns are the keys of the model turns the run made itself.
func modelTurns(t *testing.T, store *ledger.Store, id string) []string {
	t.Helper()
	rows, err := ledgerdb.Of(store).Pool().Query(t.Context(),
		`SELECT idempotency_key FROM actions WHERE workflow_id = $1 AND kind = 'model' ORDER BY id`, id)
	require.NoError(t, err)
	var keys []string
	for rows.Next() {
		var key string
		require.NoError(t, rows.Scan(&key))
		keys = append(keys, key)
	}
	require.NoError(t, rows.Err())
	return keys
}

// The test: a run charges at step 3 and escalates at step 4; its
// fork from step 4 fails. The charge is not sent again, the fork's
// compensation refunds it once, and aborting the source afterwards
// refunds nothing. The source refuses Resume and a second fork, and the
// fork, compensated, refuses to be forked.
func TestForkAfterAChargeThenTheForkFails(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	desk := &till{}
	tools := desk.tools(t)
	first3 := []agentsagatest.Turn{agentsagatest.Call("lookup", orderArgs{"o-1"}), agentsagatest.Call("lookup", orderArgs{"o-2"}),
		agentsagatest.Call("charge", moneyArgs{"o-1", 10})}
	spec := agentsaga.RunSpec{Goal: "charge o-1", Budget: agentsaga.Budget{Steps: 10}, Tools: specs(tools),
		Model: agentsagatest.Script(append(first3, agentsagatest.Refuse("o-2 looks wrong"))...)}
	source, engine, store := startSource(ctx, t, tools, spec)

	// The fork's script has no fourth turn: its first live step fails.
	forkSpec := spec
	forkSpec.Model = agentsagatest.Script(first3...)
	fork, err := source.WithLedger(store).Fork(ctx, agentsaga.ForkOptions{At: agentsaga.ForkAtFailed, Spec: &forkSpec,
		Message: "o-2 is fine", Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err)
	assert.Equal(t, source.ID+"-fork", fork.ID)
	assert.Equal(t, source.ID, forkedFrom(ctx, t, fork.ID), "the fork names its source in the Temporal UI")
	assert.Empty(t, forkedFrom(ctx, t, source.ID), "the source names none")
	requireCompensated(ctx, t, fork, "model call at step 4 failed", 1)
	charged, refunds := desk.counts()
	assert.Equal(t, []string{source.ID + "/step-003-call-1-charge"}, charged, "the charge was sent once, by the source")
	assert.Equal(t, []string{fork.ID + "/step-003-call-1-charge/compensate"}, refunds, "the fork refunded it once")
	assert.Equal(t, []string{fork.ID + "/step-004-model"}, modelTurns(t, store, fork.ID), "no model turn before step 4")

	err = source.Resume(ctx, agentsaga.ResumeInput{Message: "go on"})
	var refused *agentsaga.RefusedError
	require.ErrorAs(t, err, &refused)
	assert.Contains(t, refused.Reason, "forked into "+fork.ID)
	_, err = source.WithLedger(store).Fork(ctx, agentsaga.ForkOptions{At: 2, ID: source.ID + "-again",
		Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.ErrorIs(t, err, agentsaga.ErrForkRefused)
	_, err = fork.Fork(ctx, agentsaga.ForkOptions{At: 4, Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.ErrorIs(t, err, agentsaga.ErrForkRefused)
	assert.ErrorContains(t, err, "it was compensated")

	require.NoError(t, source.Abort(ctx, "test: the fork took over"))
	aborted, err := source.Result(ctx)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompensated, aborted.Status, aborted.Reason)
	require.NotNil(t, aborted.Saga)
	assert.Zero(t, aborted.Saga.Compensated+aborted.Saga.NotNeeded, "the source owns nothing to undo")
	charged, refunds = desk.counts()
	assert.Len(t, charged, 1)
	assert.Len(t, refunds, 1, "aborting the source refunded nothing")

	row, err := ledgerdb.Of(store).GetRun(ctx, fork.ID)
	require.NoError(t, err)
	assert.Equal(t, source.ID, row.ForkedFrom)
	assert.Equal(t, 4, row.ForkedAtStep)
}

// requireCompensated waits for run's end and checks that it was
// compensated, for reason, undoing n actions.
func requireCompensated(ctx context.Context, t *testing.T, run *agentsaga.Run, reason string, n int) {
	t.Helper()
	result, err := run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, reason)
	require.NotNil(t, result.Saga)
	assert.Equal(t, n, result.Saga.Compensated)
}

// A fork of a fork: the first fork escalates again, the second goes on
// from there and completes; every charge was made once, nothing undone,
// and the operator's messages are in the conversations.
func TestForkOfAForkCompletes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	desk := &till{}
	tools := desk.tools(t)
	turns := []agentsagatest.Turn{agentsagatest.Call("charge", moneyArgs{"o-1", 10}), agentsagatest.Refuse("is o-2 due?")}
	spec := agentsaga.RunSpec{Goal: "charge o-1 and o-2", Budget: agentsaga.Budget{Steps: 10}, Tools: specs(tools),
		Model: agentsagatest.Script(turns...)}
	source, engine, store := startSource(ctx, t, tools, spec)
	start := agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}

	second := spec
	second.Model = agentsagatest.Script(turns[0], agentsagatest.Call("charge", moneyArgs{"o-2", 20}), agentsagatest.Refuse("and o-3?"))
	first, err := source.WithLedger(store).Fork(ctx, agentsaga.ForkOptions{At: 2, Spec: &second, Message: "o-2 is due", Start: start})
	require.NoError(t, err)
	waitForStatus(t, first, agentsagatype.RunEscalated)

	third := spec
	third.Model = agentsagatest.Script(turns[0], second.Model.Script[1], agentsagatest.Answer("charged o-1 and o-2"))
	last, err := first.Fork(ctx, agentsaga.ForkOptions{At: agentsaga.ForkAtFailed, Spec: &third, Message: "o-3 is not ours",
		ID: first.ID + "-2", Start: start})
	require.NoError(t, err)
	result, err := last.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "charged o-1 and o-2", result.Answer)

	charged, refunds := desk.counts()
	assert.Equal(t, []string{source.ID + "/step-001-call-1-charge", first.ID + "/step-002-call-1-charge"}, charged)
	assert.Empty(t, refunds)
	actions, err := ledgerdb.Of(store).ListActions(ctx, last.ID)
	require.NoError(t, err)
	var keys []string
	for _, a := range actions {
		if a.Tool == "charge" {
			keys = append(keys, a.Key)
		}
	}
	assert.Equal(t, charged, keys, "the last fork owns both charges")
	msgs, err := ledgerdb.Of(store).Messages(ctx, last.ID, 1000, ledgerdb.MessageWindow{})
	require.NoError(t, err)
	var said []string
	for _, m := range msgs {
		if m.Role == "user" {
			said = append(said, m.Content)
		}
	}
	assert.Equal(t, []string{"charge o-1 and o-2", "o-2 is due", "o-3 is not ours"}, said)
	// The source and the first fork still wait on a human; their stacks
	// are empty, so aborting them undoes nothing.
	for _, run := range []*agentsaga.Run{source, first} {
		require.NoError(t, run.Abort(ctx, "test"))
		_, err := run.Result(ctx)
		require.NoError(t, err)
	}
	_, refunds = desk.counts()
	assert.Empty(t, refunds)
}

// A running source is stopped at its next step boundary, once the call it
// has in flight settled, and then forked: the fork waits for the stop, and
// takes the effects before its step.
func TestForkOfARunningSource(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	desk := &till{}
	entered, release := make(chan struct{}, 1), make(chan struct{})
	tools := append(desk.tools(t), blockingTool(t, entered, release))
	engine, store := startEngineWorker(t, agentsaga.Config{Tools: tools}, nil)
	spec := agentsaga.RunSpec{Goal: "charge, then prepare", Budget: agentsaga.Budget{Steps: 10}, Tools: specs(tools),
		Model: agentsagatest.Script(agentsagatest.Call("charge", moneyArgs{"o-1", 10}), agentsagatest.Call("prepare", struct{}{}),
			agentsagatest.Answer("done"))}
	source, err := agentsaga.Start(ctx, devServer.Client(), agentsagatest.RunID(t), spec,
		agentsaga.StartOptions{TaskQueue: engine.TaskQueue(), Ledger: store})
	require.NoError(t, err)
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the source never reached step 2's call")
	}

	type forked struct {
		run *agentsaga.Run
		err error
	}
	done := make(chan forked, 1)
	go func() {
		run, err := source.Fork(ctx, agentsaga.ForkOptions{At: 2, Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
		done <- forked{run, err}
	}()
	select {
	case f := <-done:
		t.Fatalf("forked while a call was in flight: %v", f.err)
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	f := <-done
	require.NoError(t, f.err)
	result, err := f.run.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "done", result.Answer)

	stopped, err := source.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunEscalated, stopped.Status)
	assert.Contains(t, stopped.StatusDetail, "stopped before step 3 to be forked")
	assert.Equal(t, []string{f.run.ID}, stopped.Forks)
	charged, _ := desk.counts()
	assert.Equal(t, []string{source.ID + "/step-001-call-1-charge"}, charged)
	stack, err := ledgerdb.Of(store).CompensationStack(ctx, f.run.ID)
	require.NoError(t, err)
	require.Len(t, stack, 1)
	assert.Equal(t, source.ID+"/step-001-call-1-charge", stack[0].ForwardKey)
	require.NoError(t, source.Abort(ctx, "test: forked"))
	_, refunds := desk.counts()
	assert.Empty(t, refunds)
}

// A run waiting for an approval at step 2 is forked at step 2: the call
// approved at step 1 stays approved and is not asked or made again; the
// call waiting at step 2 is asked again by the fork, under its own key,
// and made once. Cancelling the source afterwards undoes nothing.
func TestForkOfARunWaitingForAnApproval(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	desk := &refunds{}
	tools := desk.tools(t, agentsaga.WithApproval(agentsagatype.ApprovalSpec{When: "amount > 100"}))
	spec := agentsaga.RunSpec{Goal: "refund orders A and B", Budget: agentsaga.Budget{Steps: 6}, Tools: specs(tools),
		Model: agentsagatest.Script(agentsagatest.Call("refund", moneyArgs{"A", 250}), agentsagatest.Call("refund", moneyArgs{"B", 300}),
			agentsagatest.Answer("refunded both"))}
	engine, store := startEngineWorker(t, agentsaga.Config{Tools: tools}, nil)
	source, err := agentsaga.Start(ctx, devServer.Client(), agentsagatest.RunID(t), spec,
		agentsaga.StartOptions{TaskQueue: engine.TaskQueue(), Ledger: store})
	require.NoError(t, err)
	first := waitForApproval(t, source)
	_, err = source.Approve(ctx, first.Call, "alice", "A checked")
	require.NoError(t, err)
	var stale string
	require.Eventually(t, func() bool {
		waiting, err := source.Approvals(ctx)
		if err != nil || len(waiting) == 0 || waiting[0].Call == first.Call || waiting[0].Decision != nil {
			return false
		}
		stale = waiting[0].Call
		return true
	}, 30*time.Second, 50*time.Millisecond, "the source never waited for B's approval")
	require.Equal(t, 1, desk.count())

	fork, err := source.Fork(ctx, agentsaga.ForkOptions{At: 2, Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err)
	again := waitForApproval(t, fork)
	assert.Equal(t, "step-002-call-1-refund", again.Call, "B is asked again, by the fork")

	// The source's request for B was closed by the fork: nothing lists it
	// as waiting, and a decision on it is refused naming the fork.
	pending, err := ledgerdb.Of(store).AwaitingApprovals(ctx, 1000)
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(pending, func(a agentsagatype.Approval) bool { return a.WorkflowID == source.ID }),
		"the source's request is no longer listed as waiting")
	assert.True(t, slices.ContainsFunc(pending, func(a agentsagatype.Approval) bool { return a.WorkflowID == fork.ID }), "the fork's is")
	waiting, err := source.Approvals(ctx)
	require.NoError(t, err)
	assert.Empty(t, waiting, "the source still waits on B (fenced), for nobody")
	_, err = source.Approve(ctx, stale, "carol", "late")
	var closed *agentsaga.AlreadyDecidedError
	require.ErrorAs(t, err, &closed)
	assert.Equal(t, agentsagatype.ApprovalSuperseded, closed.Decision)
	assert.Equal(t, fork.ID, closed.By)
	assert.ErrorContains(t, err, "the run was forked into "+fork.ID)
	again2, err := source.Fork(ctx, agentsaga.ForkOptions{At: 2, Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err, "the same fork asked again: the source is not asked to stop")
	assert.Equal(t, fork.ID, again2.ID)
	_, err = fork.Approve(ctx, again.Call, "bob", "B checked")
	require.NoError(t, err)
	result, err := fork.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, 2, desk.count(), "A once by the source, B once by the fork")

	asked, err := ledgerdb.Of(store).RunApprovals(ctx, fork.ID)
	require.NoError(t, err)
	require.Len(t, asked, 1, "the fork asked only for B")
	assert.Equal(t, agentsagatype.ApprovalApproved, asked[0].Status)
	kept, err := ledgerdb.Of(store).RunApprovals(ctx, source.ID)
	require.NoError(t, err)
	require.Len(t, kept, 2)
	assert.Equal(t, agentsagatype.ApprovalApproved, kept[0].Status, "A's approval stays given")
	assert.Equal(t, agentsagatype.ApprovalSuperseded, kept[1].Status)
	assert.Equal(t, fork.ID, kept[1].DecidedBy)

	require.NoError(t, devServer.Client().CancelWorkflow(ctx, source.ID, ""))
	_, _ = source.Result(ctx)
	desk.mu.Lock()
	defer desk.mu.Unlock()
	assert.Zero(t, desk.cancelled, "cancelling the source undid nothing: A is the fork's")
}

// The figure: a fork at step 40 of a run with 50 steps of budget
// (it escalated at step 40) sends no model or tool request for steps 1 to
// 39, and its first live turn (step 40, which answers) comes within a
// second of the fork on a dev server (the figure is logged).
func TestForkAtStep40SendsNothingBefore(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	desk := &till{}
	tools := desk.tools(t)
	var turns []agentsagatest.Turn
	for i := range 39 {
		turns = append(turns, agentsagatest.Call("lookup", orderArgs{fmt.Sprintf("o-%d", i+1)}))
	}
	spec := agentsaga.RunSpec{Goal: "look 39 orders up", Budget: agentsaga.Budget{Steps: 50}, Tools: specs(tools),
		Watchdog: workflows.WatchdogSpec{NoProgressTurns: 100},
		Model:    agentsagatest.Script(append(slices.Clone(turns), agentsagatest.Refuse("which one?"))...)}
	source, engine, store := startSource(ctx, t, tools, spec)
	forkSpec := spec
	forkSpec.Model = agentsagatest.Script(append(slices.Clone(turns), agentsagatest.Answer("all 39 looked up"))...)

	began := time.Now()
	fork, err := source.Fork(ctx, agentsaga.ForkOptions{At: agentsaga.ForkAtFailed, Spec: &forkSpec,
		Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err)
	result, err := fork.Result(ctx)
	took := time.Since(began)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)

	var before, leaves int
	require.NoError(t, ledgerdb.Of(store).Pool().QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE activity_id < 'step-040'), count(*) FROM leaf_calls WHERE workflow_id = $1`, fork.ID).Scan(&before, &leaves))
	desk.mu.Lock()
	lookups := desk.lookups
	desk.mu.Unlock()
	t.Logf("fork at step 40: %d requests for steps 1-39, %d leaf calls in all, first live turn (and answer) %v after the fork",
		before, leaves, took.Round(time.Millisecond))
	assert.Zero(t, before, "no request for steps 1 to 39")
	assert.Equal(t, 1, leaves, "the one live turn")
	assert.Equal(t, 39, lookups, "the lookups were the source's, made once")
	assert.Less(t, took, 10*time.Second, "a loaded machine's bound; the figure is logged")
}

// A fork at a step after a sub-agent returned inherits the sub-agent's
// effects with its own: when the fork fails, its walk undoes the
// sub-agent's refund once, and the source undoes nothing.
func TestForkInheritsASubAgentsEffects(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	desk := &refunds{}
	tools := desk.tools(t)
	helper := agentsagatest.Script(agentsagatest.Call("refund", moneyArgs{"H", 20}), agentsagatest.Answer("refunded H"))
	first := []agentsagatest.Turn{agentsagatest.Call("helper", map[string]string{"task": "refund H"})}
	spec := agentsaga.RunSpec{Goal: "refund H through the helper", Budget: agentsaga.Budget{Steps: 10},
		Model:  agentsagatest.Script(append(slices.Clone(first), agentsagatest.Refuse("is that all?"))...),
		Tools:  append(specs(tools), agentsaga.ToolSpec{Name: "helper", Kind: agentsagatype.ToolKindAgent}),
		Agents: map[string]workflows.AgentSpec{"helper": {Tools: []string{"refund", "cancel_refund"}, Share: 0.5, Model: &helper}},
	}
	source, engine, store := startSource(ctx, t, tools, spec)
	require.Equal(t, 1, desk.count())

	forkSpec := spec
	forkSpec.Model = agentsagatest.Script(first...) // no second turn: the fork fails at step 2
	fork, err := source.Fork(ctx, agentsaga.ForkOptions{At: 2, Spec: &forkSpec, Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err)
	result, err := fork.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	require.NotNil(t, result.Saga)
	assert.Equal(t, 1, result.Saga.Compensated)
	desk.mu.Lock()
	cancelled := desk.cancelled
	desk.mu.Unlock()
	assert.Equal(t, 1, cancelled, "the sub-agent's refund was undone once, by the fork")
	assert.Equal(t, 1, desk.count(), "and not made again")

	require.NoError(t, source.Abort(ctx, "test"))
	_, err = source.Result(ctx)
	require.NoError(t, err)
	desk.mu.Lock()
	defer desk.mu.Unlock()
	assert.Equal(t, 1, desk.cancelled, "the source undid nothing")
	stack, err := ledgerdb.Of(store).CompensationStack(ctx, fork.ID)
	require.NoError(t, err)
	require.Len(t, stack, 1)
	assert.Equal(t, "step-001-call-1-helper/step-001-call-1-refund", stack[0].ForwardActivityID)
}

// The source of a fork keeps waiting on the request the fork closed, to
// its deadline, which then passes quietly: no reminder or timeout of the
// closed request is published after the fork, the ledger keeps it
// superseded (the timeout records nothing), and none of the source's
// activities fails over it.
func TestAForkedSourcesApprovalDeadlinePassesQuietly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	desk := &refunds{}
	tools := desk.tools(t, agentsaga.WithApproval(agentsagatype.ApprovalSpec{When: agentsagatype.ApprovalAlways, TimeoutAfter: "4s", RemindEvery: "1s"}))
	spec := agentsaga.RunSpec{Goal: "refund", Budget: agentsaga.Budget{Steps: 4}, Tools: specs(tools),
		Model: agentsagatest.Script(agentsagatest.Call("refund", moneyArgs{"A", 10}), agentsagatest.Answer("could not refund"))}
	engine, store := startEngineWorker(t, agentsaga.Config{Tools: tools}, nil)
	source, err := agentsaga.Start(ctx, devServer.Client(), agentsagatest.RunID(t), spec, agentsaga.StartOptions{TaskQueue: engine.TaskQueue(), Ledger: store})
	require.NoError(t, err)
	waiting := waitForApproval(t, source)
	forkSpec := spec
	forkSpec.Model = agentsagatest.Script(agentsagatest.Answer("nothing to refund"))
	fork, err := source.Fork(ctx, agentsaga.ForkOptions{At: 1, Spec: &forkSpec, Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err)
	log := runevents.New(ledgerdb.Of(store).Pool())
	forkedAt, err := log.Head(ctx, source.ID)
	require.NoError(t, err)

	// Denied by its timeout, the source's next turn meets its fenced
	// claims, as any forked source that moves on does.
	result, err := source.Result(ctx)
	require.ErrorContains(t, err, "forked into "+fork.ID)
	assert.Equal(t, agentsagatype.RunFailed, result.Status)
	events, err := log.Read(ctx, source.ID, forkedAt, 1000)
	require.NoError(t, err)
	for _, e := range events {
		assert.NotContains(t, []string{runevents.ApprovalReminder, runevents.ApprovalTimedOut}, e.Kind, "nothing is published of the closed request")
	}
	closed, err := ledgerdb.Of(store).GetApproval(ctx, waiting.Key)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ApprovalSuperseded, closed.Status, "the timeout recorded nothing")
	assert.Equal(t, fork.ID, closed.DecidedBy)
	scheduled := map[int64]string{}
	history := devServer.Client().GetWorkflowHistory(ctx, source.ID, "", false, 0)
	for history.HasNext() {
		event, err := history.Next()
		require.NoError(t, err)
		if s := event.GetActivityTaskScheduledEventAttributes(); s != nil {
			scheduled[event.GetEventId()] = strings.TrimPrefix(s.GetActivityType().GetName(), agentsagatype.NamePrefix)
		}
		if failed := event.GetActivityTaskFailedEventAttributes(); failed != nil {
			assert.NotContains(t, []string{wire.ActivityDecideApproval, wire.ActivityPublishWaitEvent}, scheduled[failed.GetScheduledEventId()],
				"the timeout of the closed request failed: %v", failed.GetFailure())
		}
	}
	assert.Contains(t, slices.Collect(maps.Values(scheduled)), wire.ActivityDecideApproval, "the source's timeout did ask the ledger")
	assert.Zero(t, desk.count(), "the call was never sent")
}

// A fork charged to an account is admitted before its first live turn, as
// a new run is (commandsVersion11): on an account of one place, the
// source's place goes back when it is forked, a run that waited takes it,
// and the fork waits queued. Taken out of the queue, the fork makes no
// turn and refunds the charge it inherited, once; a fork admitted when
// room frees goes on live. Aborting the sources afterwards refunds
// nothing: every charge is sent once and undone at most once.
func TestAForkWaitsForAdmissionOnItsAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	desk := &till{}
	tools := desk.tools(t)
	engine, store := startEngineWorker(t, agentsaga.Config{Tools: tools, Temporal: devServer.Client()}, nil)
	account := agentsagatest.RunID(t)
	require.NoError(t, ledgerdb.Of(store).SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: account, MaxConcurrentRuns: 1}, "test"))
	opts := agentsaga.StartOptions{TaskQueue: engine.TaskQueue(), Ledger: store}
	charging := func(order string) agentsaga.RunSpec {
		return agentsaga.RunSpec{Goal: "charge " + order, Budget: agentsaga.Budget{Steps: 10, Account: account}, Tools: specs(tools),
			Model: agentsagatest.Script(agentsagatest.Call("charge", moneyArgs{order, 10}), agentsagatest.Refuse("is "+order+" right?"))}
	}
	status := func(id string) string {
		run, err := ledgerdb.Of(store).GetRun(ctx, id)
		require.NoError(t, err)
		return run.Status
	}

	first, err := agentsaga.Start(ctx, devServer.Client(), account+"-1", charging("o-1"), opts)
	require.NoError(t, err)
	waitForStatus(t, first, agentsagatype.RunEscalated)
	second, err := agentsaga.Start(ctx, devServer.Client(), account+"-2", charging("o-2"), opts)
	require.NoError(t, err)
	waitForStatus(t, second, agentsagatype.RunQueued)

	// Forking the first gives its place to the second, and the fork waits.
	fork := charging("o-1")
	fork.Model = agentsagatest.Script(agentsagatest.Call("charge", moneyArgs{"o-1", 10}), agentsagatest.Answer("charged o-1"))
	queued, err := first.WithLedger(store).Fork(ctx, agentsaga.ForkOptions{At: agentsaga.ForkAtFailed, Spec: &fork,
		Message: "o-1 is right", Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err)
	waitForStatus(t, second, agentsagatype.RunEscalated)
	waitForStatus(t, queued, agentsagatype.RunQueued)
	row, err := ledgerdb.Of(store).GetRun(ctx, queued.ID)
	require.NoError(t, err)
	assert.Contains(t, row.StatusDetail, "account "+account+" runs 1 of its 1 concurrent runs", "it waits for the place the second run took")
	assert.Empty(t, modelTurns(t, store, queued.ID), "a queued fork makes no turn")

	require.NoError(t, queued.WithLedger(store).CancelQueued(ctx))
	requireCompensated(ctx, t, queued, "cancelled in the admission queue", 1)
	assert.Empty(t, modelTurns(t, store, queued.ID))
	charged, refunds := desk.counts()
	assert.Equal(t, []string{first.ID + "/step-001-call-1-charge", second.ID + "/step-001-call-1-charge"}, charged)
	assert.Equal(t, []string{queued.ID + "/step-001-call-1-charge/compensate"}, refunds, "the cancelled fork refunded what it inherited, once")

	// Forking the second frees the one place, and its fork is admitted.
	fork = charging("o-2")
	fork.Model = agentsagatest.Script(agentsagatest.Call("charge", moneyArgs{"o-2", 10}), agentsagatest.Answer("charged o-2"))
	admitted, err := second.WithLedger(store).Fork(ctx, agentsaga.ForkOptions{At: agentsaga.ForkAtFailed, Spec: &fork,
		Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err)
	result, err := admitted.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "charged o-2", result.Answer)
	assert.Equal(t, []string{admitted.ID + "/step-002-model"}, modelTurns(t, store, admitted.ID), "its live steps only")

	for _, source := range []*agentsaga.Run{first, second} {
		require.NoError(t, source.Abort(ctx, "test: the forks took over"))
		_, err := source.Result(ctx)
		require.NoError(t, err)
	}
	charged, refunds = desk.counts()
	assert.Len(t, charged, 2, "no charge was sent again")
	assert.Len(t, refunds, 1, "aborting the sources refunded nothing")
	assert.Equal(t, agentsagatype.RunCompleted, status(admitted.ID))
}

// The test of --at failed: a run escalates on a tool's failure
// (escalate.after_tool_failures 1); the tool is mended, and a fork of the
// source's spec at failed makes the step that failed again, live, and
// completes. The failed call is not the fork's: it calls the tool once,
// under its own key.
func TestForkAtFailedAfterAToolFailureCompletes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var down atomic.Bool
	down.Store(true)
	var keys sync.Map
	reserve := agentsaga.MustTool(agentsaga.NewTool("reserve", "Reserve stock for an order.", func(ctx context.Context, args orderArgs) (string, error) {
		keys.Store(agentsaga.CallKey(ctx), true)
		if down.Load() {
			return "", agentsaga.Permanent(errors.New("inventory service: 503, down for maintenance"))
		}
		return "reserved stock for " + args.Order, nil
	}))
	tools := []agentsaga.Tool{reserve}
	spec := agentsaga.RunSpec{Goal: "reserve stock for o-1", Budget: agentsaga.Budget{Steps: 6}, Tools: specs(tools),
		Escalate: workflows.EscalationSpec{AfterToolFailures: 1},
		Model:    agentsagatest.Script(agentsagatest.Call("reserve", orderArgs{"o-1"}), agentsagatest.Answer("reserved o-1"))}
	source, engine, store := startSource(ctx, t, tools, spec)
	row, err := ledgerdb.Of(store).GetRun(ctx, source.ID)
	require.NoError(t, err)
	assert.Contains(t, row.StatusDetail, "reserve", "it escalated on the tool's failure")

	down.Store(false)
	fork, err := source.Fork(ctx, agentsaga.ForkOptions{At: agentsaga.ForkAtFailed, Start: agentsaga.StartOptions{TaskQueue: engine.TaskQueue()}})
	require.NoError(t, err)
	result, err := fork.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "reserved o-1", result.Answer)
	var called []string
	keys.Range(func(k, _ any) bool { called = append(called, k.(string)); return true })
	slices.Sort(called)
	assert.Equal(t, []string{fork.ID + "/step-001-call-1-reserve", source.ID + "/step-001-call-1-reserve"}, called)
	assert.Equal(t, []string{fork.ID + "/step-001-model", fork.ID + "/step-002-model"}, modelTurns(t, store, fork.ID))
}
