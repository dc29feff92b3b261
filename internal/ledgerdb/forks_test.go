package ledgerdb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// recordSteps writes what a run's steps from..to did, as the activities
// would: each step's model turn (reading the conversation through its
// first message) and its reply, then one charge with a refund registered
// as its undo, and the charge's output. It returns the next message's place.
func recordSteps(ctx context.Context, t *testing.T, store *ledgerdb.Store, id string, from, to, seq int) int {
	t.Helper()
	for step := from; step <= to; step++ {
		turn := activityid.Model(step)
		claim, err := store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: activityid.Key(id, turn), WorkflowID: id, ActivityID: turn,
			Tool: "model:scripted", Arguments: fmt.Sprintf(`{"through": %d, "finish": false}`, seq), Kind: ledgerdb.ActionModel}, time.Minute)
		require.NoError(t, err)
		_, err = store.CompleteAction(ctx, claim.Action.Key, claim.Action.Attempts, `{"content": ""}`)
		require.NoError(t, err)
		call := activityid.Tool(step, 1, "charge")
		claim, err = store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: activityid.Key(id, call), WorkflowID: id, ActivityID: call,
			Tool: "charge", Arguments: fmt.Sprintf(`{"amount": %d}`, step),
			Compensation: &wire.CompensationRequest{Tool: "refund", ArgumentsTemplate: `{"charge": "{{result.id}}"}`}}, time.Minute)
		require.NoError(t, err)
		_, err = store.CompleteAction(ctx, claim.Action.Key, claim.Action.Attempts, fmt.Sprintf(`{"id": "ch_%d"}`, step))
		require.NoError(t, err)
		require.NoError(t, store.AppendMessages(ctx, id, []ledgerdb.Message{
			{Seq: seq, Role: "assistant", Content: fmt.Sprintf("step %d: charge", step)},
			{Seq: seq + 1, Role: "tool", Content: fmt.Sprintf(`{"id": "ch_%d"}`, step), SourceKey: activityid.Key(id, call)},
		}))
		seq += 2
	}
	return seq
}

// newSource records a run of steps steps, escalated at its last, with its
// system prompt and goal as messages 0 and 1.
func newSource(ctx context.Context, t *testing.T, store *ledgerdb.Store, id string, steps int) {
	t.Helper()
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: id, RunID: "r1", Goal: "charge", Spec: json.RawMessage(`{}`)}))
	require.NoError(t, store.AppendMessages(ctx, id, []ledgerdb.Message{{Seq: 0, Role: "system", Content: "be good", Pinned: true},
		{Seq: 1, Role: "user", Content: "charge", Pinned: true}}))
	recordSteps(ctx, t, store, id, 1, steps, 2)
	require.NoError(t, store.SetRunStatus(ctx, id, agentsagatype.RunEscalated, "the charge at the last step failed"))
}

func owners(ctx context.Context, t *testing.T, store *ledgerdb.Store, ids ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, id := range ids {
		stack, err := store.CompensationStack(ctx, id)
		require.NoError(t, err)
		for _, c := range stack {
			out[id] = append(out[id], c.ForwardKey)
		}
	}
	return out
}

// A fork at step 4 of a run of five steps takes the charges of steps 1 to
// 3 (their compensations with them) and the conversation before step 4's
// turn; the source keeps steps 4 and 5, is linked to the fork, and
// refuses a second fork. Asked again, the fork is what it was.
func TestForkMovesTheEffectsBeforeTheStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	newSource(ctx, t, store, "src", 5)

	fork, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "src", Fork: "src-fork", At: 4, Spec: json.RawMessage(`{"goal": "charge"}`)})
	require.NoError(t, err)
	assert.Equal(t, 4, fork.At)
	assert.Equal(t, 8, fork.Seq, "system, goal, and two messages for each of steps 1 to 3")
	assert.Equal(t, []string{"src/step-001-call-1-charge", "src/step-002-call-1-charge", "src/step-003-call-1-charge"}, fork.Moved)
	assert.Equal(t, map[string][]string{
		"src-fork": {"src/step-003-call-1-charge", "src/step-002-call-1-charge", "src/step-001-call-1-charge"},
		"src":      {"src/step-005-call-1-charge", "src/step-004-call-1-charge"},
	}, owners(ctx, t, store, "src", "src-fork"), "newest first, each owned by one run")

	msgs, err := store.Messages(ctx, "src-fork", 100, ledgerdb.MessageWindow{})
	require.NoError(t, err)
	require.Len(t, msgs, 8)
	assert.Equal(t, "step 3: charge", msgs[6].Content)
	read, err := store.RecordResultMessage(ctx, "src-fork", "src/step-002-call-1-charge", ledgerdb.Message{Seq: 8})
	require.NoError(t, err, "an inherited output reads back whole in the fork")
	assert.JSONEq(t, `{"id": "ch_2"}`, read)

	forked, err := store.GetRun(ctx, "src-fork")
	require.NoError(t, err)
	assert.Equal(t, "src", forked.ForkedFrom)
	assert.Equal(t, 4, forked.ForkedAtStep)
	assert.Equal(t, "charge", forked.Goal)
	source, err := store.GetRun(ctx, "src")
	require.NoError(t, err)
	assert.Equal(t, []string{"src-fork"}, source.Forks)

	again, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "src", Fork: "src-fork", At: 4})
	require.NoError(t, err, "the same fork asked again")
	assert.Equal(t, fork, again)
	_, err = store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "src", Fork: "other", At: 2})
	require.ErrorIs(t, err, ledgerdb.ErrForkRefused)
	assert.ErrorContains(t, err, "already forked into src-fork")

	// The source can no longer act: its forward claims are fenced.
	_, err = store.ClaimAction(ctx, ledgerdb.ActionRequest{Key: "src/step-006-model", WorkflowID: "src", ActivityID: "step-006-model",
		Tool: "model:scripted", Arguments: `{}`, Kind: ledgerdb.ActionModel}, time.Minute)
	require.ErrorIs(t, err, ledgerdb.ErrFenced)
	assert.ErrorContains(t, err, "forked into src-fork")
}

// A fork of a fork inherits what its source inherited before the step,
// and its source's own effects, each compensation under a key of its own;
// a step before its source's first is its source's source's to fork.
func TestForkOfAFork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	newSource(ctx, t, store, "a", 4)
	first, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "a", Fork: "b", At: 3})
	require.NoError(t, err)
	recordSteps(ctx, t, store, "b", 3, 5, first.Seq)
	require.NoError(t, store.SetRunStatus(ctx, "b", agentsagatype.RunEscalated, ""))

	_, err = store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "b", Fork: "c", At: 2})
	require.ErrorIs(t, err, ledgerdb.ErrForkRefused)
	assert.ErrorContains(t, err, "step 2 is not a step it made (it made steps 3 to 5)")

	second, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "b", Fork: "c", At: ledgerdb.ForkAtFailed})
	require.NoError(t, err)
	assert.Equal(t, 5, second.At, "b escalated at its last step")
	assert.Equal(t, []string{"a/step-001-call-1-charge", "a/step-002-call-1-charge", "b/step-003-call-1-charge", "b/step-004-call-1-charge"}, second.Moved)
	stack, err := store.CompensationStack(ctx, "c")
	require.NoError(t, err)
	ids := map[string]bool{}
	for _, c := range stack {
		ids[c.ForwardActivityID] = true
	}
	assert.Len(t, ids, 4, "every inherited compensation has an activity ID, and so a key, of its own: %v", ids)
	assert.Equal(t, map[string][]string{"b": {"b/step-005-call-1-charge"}, "a": {"a/step-004-call-1-charge", "a/step-003-call-1-charge"}},
		owners(ctx, t, store, "a", "b"))
}

// A sub-agent's effects go with the step that called it, with a
// compensation activity ID that names the sub-agent.
func TestForkTakesASubAgentsEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	newSource(ctx, t, store, "p", 3)
	child := activityid.Key("p", activityid.Tool(2, 2, "helper"))
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: child, RunID: "r2", ParentWorkflowID: "p", Goal: "help", Spec: json.RawMessage(`{}`)}))
	recordSteps(ctx, t, store, child, 1, 1, 0)
	require.NoError(t, store.FinishRun(ctx, child, agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))

	_, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: child, Fork: "x", At: 1})
	require.ErrorIs(t, err, ledgerdb.ErrForkRefused)
	assert.ErrorContains(t, err, "forking inside a sub-agent is not supported")

	fork, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "p", Fork: "q", At: 3})
	require.NoError(t, err)
	assert.Contains(t, fork.Moved, child+"/step-001-call-1-charge")
	stack, err := store.CompensationStack(ctx, "q")
	require.NoError(t, err)
	require.Len(t, stack, 3)
	assert.Equal(t, "step-002-call-2-helper/step-001-call-1-charge", stack[0].ForwardActivityID)
}

// A source that is compensated, being compensated, running, or asked for
// a step it did not make is refused, saying why, and nothing changes.
func TestForkRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	for id, prepare := range map[string]func(string){
		"compensated": func(id string) {
			require.NoError(t, store.FinishRun(ctx, id, agentsagatype.RunOutcome{Status: agentsagatype.RunCompensated}))
		},
		"compensating": func(id string) {
			_, err := store.CloseRun(ctx, id)
			require.NoError(t, err)
		},
		"running": func(id string) { require.NoError(t, store.SetRunStatus(ctx, id, agentsagatype.RunRunning, "")) },
	} {
		newSource(ctx, t, store, id, 2)
		prepare(id)
		_, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: id, Fork: id + "-fork", At: 2})
		require.ErrorIs(t, err, ledgerdb.ErrForkRefused, id)
		t.Logf("%s: %v", id, err)
		_, err = store.GetRun(ctx, id+"-fork")
		require.ErrorIs(t, err, ledgerdb.ErrNotFound, "a refused fork leaves no run behind")
		assert.Len(t, owners(ctx, t, store, id)[id], 2, "a refused fork moves nothing")
	}
	// A failed run walked its stack and found nothing to undo: it may be
	// forked, at the step it failed at.
	newSource(ctx, t, store, "failed", 2)
	_, err := store.CloseRun(ctx, "failed")
	require.NoError(t, err)
	require.NoError(t, store.FinishRun(ctx, "failed", agentsagatype.RunOutcome{Status: agentsagatype.RunFailed}))
	fork, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "failed", Fork: "failed-fork", At: ledgerdb.ForkAtFailed})
	require.NoError(t, err)
	assert.Equal(t, 2, fork.At)

	newSource(ctx, t, store, "done", 3)
	require.NoError(t, store.FinishRun(ctx, "done", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))
	for _, c := range []struct {
		at   int
		fork string
		want string
	}{
		{ledgerdb.ForkAtFailed, "f", "it did not fail or escalate (status completed)"},
		{4, "f", "step 4 is not a step it made (it made steps 1 to 3)"},
		{-1, "f", "steps start at 1"},
		{2, "done", "a new, different ID"},
		{2, "", "a new, different ID"},
	} {
		_, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "done", Fork: c.fork, At: c.at})
		require.ErrorIs(t, err, ledgerdb.ErrForkRefused)
		assert.ErrorContains(t, err, c.want)
	}
	_, err = store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "nobody", Fork: "f", At: 1})
	require.ErrorIs(t, err, ledgerdb.ErrNotFound)
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: "taken", RunID: "r", Goal: "g", Spec: json.RawMessage(`{}`)}))
	_, err = store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "done", Fork: "taken", At: 2})
	require.ErrorIs(t, err, ledgerdb.ErrForkRefused)
	assert.ErrorContains(t, err, "already has a run taken")
	assert.Len(t, owners(ctx, t, store, "done")["done"], 3)
}

// Forks of one source raced from many goroutines: exactly one wins, and
// every effect the source had is owned by the source or the winner, never
// by a loser, never by none, with its compensation owned alike.
func TestConcurrentForksOfOneSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const steps, racers = 6, 8
	newSource(ctx, t, store, "s", steps)
	before, err := store.ListActions(ctx, "s")
	require.NoError(t, err)

	var wg sync.WaitGroup
	won := make(chan ledgerdb.Fork, racers)
	for i := range racers {
		wg.Go(func() {
			fork, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "s", Fork: fmt.Sprintf("s-fork-%d", i), At: 2 + i%(steps-1)})
			if err == nil {
				won <- fork
				return
			}
			assert.ErrorIs(t, err, ledgerdb.ErrForkRefused)
		})
	}
	wg.Wait()
	close(won)
	var winners []ledgerdb.Fork
	for f := range won {
		winners = append(winners, f)
	}
	require.Len(t, winners, 1, "exactly one fork wins")
	winner := winners[0]

	violations := 0
	for _, a := range before {
		var owner, compOwner string
		require.NoError(t, store.Pool().QueryRow(ctx, `
			SELECT a.workflow_id, coalesce(c.workflow_id, a.workflow_id) FROM actions a
			LEFT JOIN compensations c ON c.forward_key = a.idempotency_key WHERE a.idempotency_key = $1`, a.Key).Scan(&owner, &compOwner))
		switch {
		case owner != compOwner:
			violations++
			t.Errorf("%s is owned by %s and its compensation by %s", a.Key, owner, compOwner)
		case strings.HasSuffix(a.Key, "-model") && owner != "s":
			violations++
			t.Errorf("model turn %s moved to %s", a.Key, owner)
		case owner != "s" && owner != winner.Fork:
			violations++
			t.Errorf("%s is owned by %s, neither the source nor the fork", a.Key, owner)
		}
	}
	var losers int
	require.NoError(t, store.Pool().QueryRow(ctx, `
		SELECT (SELECT count(*) FROM runs WHERE workflow_id LIKE 's-fork-%' AND workflow_id <> $1)
		     + (SELECT count(*) FROM messages WHERE workflow_id LIKE 's-fork-%' AND workflow_id <> $1)`, winner.Fork).Scan(&losers))
	violations += losers
	t.Logf("winner %s at step %d took %d effects; violations: %d", winner.Fork, winner.At, len(winner.Moved), violations)
	assert.Zero(t, violations)
	assert.Len(t, winner.Moved, winner.At-1)
}

// FuzzForkRun forks a fresh run of four steps at an arbitrary step into an
// arbitrary ID. The ledger refuses (changing nothing), or moves exactly the
// effects before the step, each to one owner.
func FuzzForkRun(f *testing.F) {
	for _, seed := range []struct {
		at   int
		fork string
	}{{2, "fork"}, {ledgerdb.ForkAtFailed, "f"}, {-1, "x"}, {4, ""}, {5, "f"}, {1, "f/step-001-model"}, {3, "\x00"}, {3, "é\xff"}, {1 << 40, "big"}} {
		f.Add(seed.at, seed.fork)
	}
	ctx := context.Background()
	store := ledgertest.NewStore(f)
	n := 0
	f.Fuzz(func(t *testing.T, at int, fork string) {
		if strings.HasPrefix(fork, "src-") {
			t.Skip("a source's ID")
		}
		n++
		source := fmt.Sprintf("src-%d", n)
		newSource(ctx, t, store, source, 4)
		got, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: source, Fork: fork, At: at})
		if err != nil {
			if !errors.Is(err, ledgerdb.ErrForkRefused) {
				t.Logf("not refused as a fork, but failed: %v", err) // an ID Postgres cannot store
			}
			assert.Len(t, owners(ctx, t, store, source)[source], 4, "a failed fork moves nothing")
			run, err := store.GetRun(ctx, source)
			require.NoError(t, err)
			assert.Empty(t, run.Forks)
			return
		}
		want := at
		if at == ledgerdb.ForkAtFailed {
			want = 4
		}
		require.Equal(t, want, got.At)
		require.Len(t, got.Moved, want-1)
		stacks := owners(ctx, t, store, source, fork)
		assert.Len(t, stacks[source], 4-(want-1))
		assert.Len(t, stacks[fork], want-1)
	})
}

// A fork whose client is lost in the middle of the move (here its context
// ends while the move waits for a compensation's row, after the fork's
// run row was written and the actions moved) leaves nothing moved and no
// fork behind: the move is one transaction. The same fork then succeeds.
func TestForkInterruptedMidMoveLeavesNothingHalfMoved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	newSource(ctx, t, store, "s", 3)
	blocker, err := store.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(ctx) }()
	_, err = blocker.Exec(ctx, `SELECT 1 FROM compensations WHERE forward_key = 's/step-001-call-1-charge' FOR UPDATE`)
	require.NoError(t, err)

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = store.ForkRun(short, ledgerdb.ForkRequest{Source: "s", Fork: "s-fork", At: 3})
	require.Error(t, err, "the move waited for the locked compensation until its client gave up")
	require.NoError(t, blocker.Rollback(ctx))

	assert.Len(t, owners(ctx, t, store, "s")["s"], 3, "every effect is still the source's")
	_, err = store.GetRun(ctx, "s-fork")
	require.ErrorIs(t, err, ledgerdb.ErrNotFound)
	source, err := store.GetRun(ctx, "s")
	require.NoError(t, err)
	assert.Empty(t, source.Forks)
	var copied int
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT count(*) FROM messages WHERE workflow_id = 's-fork'`).Scan(&copied))
	assert.Zero(t, copied)

	fork, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "s", Fork: "s-fork", At: 3})
	require.NoError(t, err)
	assert.Len(t, fork.Moved, 2)
}

// A source forked while a call of it (and one of its sub-agent's) waits for
// an approval: the fork closes both requests as superseded, naming itself,
// in its move; they are no longer listed as waiting, their runs' logs say
// they were decided, and a decision on them is refused naming the fork.
// An approval given before stays given. The same fork asked again is
// answered the same and closes nothing twice; another fork is refused.
func TestForkSupersedesTheSourcesOpenApprovals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	newSource(ctx, t, store, "w", 2)
	require.NoError(t, store.SetRunStatus(ctx, "w", agentsagatype.RunRunning, ""), "waiting for an approval, the run is running")
	child := activityid.Key("w", activityid.Tool(2, 3, "helper"))
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: child, RunID: "r2", ParentWorkflowID: "w", Goal: "help", Spec: json.RawMessage(`{}`)}))
	request := func(workflowID, call string) string {
		key := activityid.Key(workflowID, call)
		_, err := store.RequestApproval(ctx, agentsagatype.ApprovalRequest{Key: key, WorkflowID: workflowID, Call: call, Tool: "refund",
			Arguments: `{"amount": 250}`, Why: "amount > 100"})
		require.NoError(t, err)
		return key
	}
	given := request("w", activityid.Tool(1, 2, "refund"))
	_, err := store.DecideApproval(ctx, given, agentsagatype.ApprovalApproved, "alice", "checked")
	require.NoError(t, err)
	waiting, childWaiting := request("w", activityid.Tool(2, 2, "refund")), request(child, activityid.Tool(1, 1, "refund"))

	fork, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "w", Fork: "w-fork", At: 2})
	require.NoError(t, err)
	for _, key := range []string{waiting, childWaiting} {
		closed, err := store.GetApproval(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, agentsagatype.ApprovalSuperseded, closed.Status, key)
		assert.Equal(t, "w-fork", closed.DecidedBy, "the fork's ID: %s", key)
		assert.Contains(t, closed.Reason, "forked into w-fork at step 2")
		assert.False(t, closed.DecidedAt.IsZero())
	}
	kept, err := store.GetApproval(ctx, given)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ApprovalApproved, kept.Status, "given before the step, it stays given")
	assert.Equal(t, "alice", kept.DecidedBy)

	listed, err := store.AwaitingApprovals(ctx, 100)
	require.NoError(t, err)
	assert.Empty(t, listed, "nothing waits for a human")
	listed, err = store.AwaitingApprovalsUnder(ctx, "", 100)
	require.NoError(t, err)
	assert.Empty(t, listed)
	for id, key := range map[string]string{"w": waiting, child: childWaiting} {
		var decided []string
		for _, e := range eventsOf(t, store, id) {
			if e.Kind == runevents.ApprovalDecided {
				decided = append(decided, e.Key)
				var a agentsagatype.Approval
				require.NoError(t, json.Unmarshal(e.Data, &a))
				assert.Equal(t, agentsagatype.ApprovalSuperseded, a.Status)
				assert.Equal(t, "w-fork", a.DecidedBy)
			}
		}
		assert.Equal(t, []string{key + "/decided"}, decided, id)
	}

	for _, d := range []struct{ status, by string }{{agentsagatype.ApprovalApproved, "bob"}, {agentsagatype.ApprovalTimedOut, "agentsaga"}} {
		_, err = store.DecideApproval(ctx, waiting, d.status, d.by, "late")
		require.ErrorIs(t, err, ledgerdb.ErrSuperseded, d.status)
		require.ErrorIs(t, err, ledgerdb.ErrDecided, "settled: %s", d.status)
		assert.ErrorContains(t, err, "approval "+waiting+": the run was forked into w-fork")
	}

	closedAt, err := store.GetApproval(ctx, waiting)
	require.NoError(t, err)
	again, err := store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "w", Fork: "w-fork", At: 2})
	require.NoError(t, err, "the same fork asked again")
	assert.Equal(t, fork, again)
	still, err := store.GetApproval(ctx, waiting)
	require.NoError(t, err)
	assert.Equal(t, closedAt, still, "closed once")
	_, err = store.ForkRun(ctx, ledgerdb.ForkRequest{Source: "w", Fork: "w-other", At: 2})
	require.ErrorIs(t, err, ledgerdb.ErrForkRefused)
	assert.ErrorContains(t, err, "already forked into w-fork")
}
