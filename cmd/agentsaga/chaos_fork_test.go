package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/workflows"
)

// The fork case (boundaryForking, issue 45) strikes a fork instead of a
// tool call. Its run charges ann, bob and cat, ships, is refused (403) and
// escalates. Then:
//
//  1. the harness forks it at step 2 with `agentsaga fork`, holding ann's
//     actions row so that the fork's transaction waits in the middle of
//     the move (the source's row locked, ann's effect not yet moved), and
//     SIGKILLs that process: the move's client is lost halfway;
//  2. it forks again, lets the move through, and SIGKILLs worker-1 while
//     the fork's first live call (bob's charge, under the fork's key) is
//     inside the service; worker-2 takes over;
//  3. the fork ships, is refused and escalates; the harness aborts it, then
//     the source: each walks what it owns.
//
// I9 counts what breaks "each effect is done once and undone at most once":
// after each fault, and at the end, an effect the source made that is owned
// by both runs or by neither, or by the wrong one (after the lost move, the
// source; after the fork, the fork before step 2, the source from it); and
// at the end a charge the service refunded other than exactly once. I1-I8
// are the tool-call cases' and are not counted for it.

// forkChaosStep is where the fork case forks its run: ann's charge (step 1)
// moves to the fork, bob's and cat's stay the source's.
const forkChaosStep = 2

// runForkChaosCase drives the fork case (its setUp is every case's).
func runForkChaosCase(r *chaosRun) chaosOutcome {
	out := chaosOutcome{Case: r.cc, Takeover: -1}
	ctx, cancel := context.WithTimeout(context.Background(), r.limit())
	var background sync.WaitGroup
	defer func() {
		cancel()
		background.Wait()
	}()
	r.setUp(ctx)
	fork := r.wf + "-fork"
	r.faultActivity = fmt.Sprintf("step-%03d-call-1-charge", forkChaosStep)
	r.faultKey = fork + "/" + r.faultActivity
	r.hold = r.tool.hold(r.faultKey, holdAfterEffect, 0)
	run := startFaultRun(ctx, r.t, r.c, r.wf, r.spec)
	r.note("started run %s on %s", r.wf, r.workers[0].name)
	r.t.Cleanup(func() {
		for _, id := range []string{r.wf, fork} {
			_ = r.c.TerminateWorkflow(context.Background(), id, "", "chaos run over")
		}
	})
	r.must(pollUntil(ctx, r.wf+" to escalate", 250*time.Millisecond, func() bool {
		stored, err := r.ledger.run(ctx, r.wf)
		return err == nil && stored.Status == agentsagatype.RunEscalated
	}))
	owned, err := r.ledger.effectOwners(ctx, r.wf)
	r.must(err)
	effects := sortedKeys(owned)
	r.note("%s escalated owning %d effects", r.wf, len(effects))

	// 1. The move's client is killed halfway.
	annKey := r.wf + "/step-001-call-1-charge"
	lock, err := r.ledger.lockAction(ctx, annKey)
	r.must(err)
	r.t.Cleanup(lock.release)
	mover := r.forkProcess("fork-1", fork)
	r.must(r.waitForWaiter(ctx, lock, "fork-1's move to wait for "+annKey))
	mover.kill()
	r.note("killed fork-1 while its move waited for %s", annKey)
	lock.release()
	r.checkOwners(ctx, &out, "after the move's client was killed", effects, fork, func(string) string { return r.wf })

	// 2. The fork goes through; its worker is killed during its first call.
	mover = r.forkProcess("fork-2", fork)
	if !mover.wait(time.Minute) || mover.err != nil {
		r.must(fmt.Errorf("agentsaga fork %s (again): %v\n%s", r.wf, mover.err, mover.log()))
	}
	r.note("fork-2 forked %s into %s", r.wf, fork)
	r.checkOwners(ctx, &out, "after the fork", effects, fork, r.ownerAfterFork(fork))
	arrived, arrivedCancel := context.WithTimeout(ctx, 60*time.Second)
	if err := r.hold.waitArrived(arrived); err != nil {
		out.Missed = "the fork's first call never reached the service: " + err.Error()
	} else {
		r.faultAttempt = r.hold.attempt
		r.kill(r.workers[0])
	}
	arrivedCancel()
	r.hold.Release()
	r.startWorker("worker-2")

	// 3. Each run escalates, is aborted and walks what it owns.
	results := map[string]workflows.RunResult{}
	for _, id := range []string{fork, r.wf} {
		ended := make(chan struct{})
		waiter := &chaosRun{t: r.t, env: r.env, cc: r.cc, began: r.began, c: r.c, wf: id, ledger: r.ledger, tool: r.tool}
		background.Add(1)
		go func() {
			defer background.Done()
			waiter.abortWhenWaiting(ctx, ended)
		}()
		handle := run
		if id == fork {
			handle = r.c.GetWorkflow(ctx, fork, "")
		}
		result, err := chaosResult(ctx, handle)
		close(ended)
		if err != nil {
			out.Err = err.Error()
			return out
		}
		r.note("%s ended %s: %s", id, result.Status, clip(result.Reason, 160))
		results[id] = result
	}
	out.Status = results[r.wf].Status + "/" + results[fork].Status
	r.must(sleepCtx(ctx, r.cc.timeout()+2*time.Second)) // no zombie left to write (as in every case)
	r.checkOwners(ctx, &out, "at the end", effects, fork, r.ownerAfterFork(fork))
	st := r.tool.state()
	for _, key := range sortedKeys(st.executions) {
		if strings.Contains(key, "charge") && !strings.Contains(key, "compensate") && st.refunds[key] != 1 {
			out.violate(9, "the charge %s was refunded %d times, not once (its owner's walk undoes it)", key, st.refunds[key])
		}
	}
	return out
}

// forkProcess runs `agentsaga fork` of the case's run at forkChaosStep
// into fork, as an operator would.
func (r *chaosRun) forkProcess(name, fork string) *process {
	env := []string{
		"TEMPORAL_ADDRESS=" + r.env.temporal.address(),
		"TEMPORAL_NAMESPACE=" + r.env.namespace,
		"DATABASE_URL=" + r.databaseURL(),
	}
	return startProcess(r.t, name, filepath.Join(r.t.TempDir(), name+".log"), env, r.env.bin,
		"fork", r.wf, "--at", fmt.Sprint(forkChaosStep), "--id", fork)
}

// ownerAfterFork says who owns an effect of the source once it was forked:
// the fork before forkChaosStep, the source from it.
func (r *chaosRun) ownerAfterFork(fork string) func(key string) string {
	before := r.wf + fmt.Sprintf("/step-%03d-call-0-", forkChaosStep) // below the step's calls
	return func(key string) string {
		if key < before {
			return fork
		}
		return r.wf
	}
}

// checkOwners counts, as I9, each of the source's effects owned by both
// runs, by neither, or by another than owner says.
func (r *chaosRun) checkOwners(ctx context.Context, out *chaosOutcome, when string, effects []string, fork string, owner func(string) string) {
	owners, err := r.ledger.effectOwners(ctx, r.wf, fork)
	r.must(err)
	var wrong []string
	for _, key := range effects {
		switch got := owners[key]; {
		case len(got) > 1:
			out.violate(9, "%s: %s is owned by %v", when, key, got)
		case len(got) == 0:
			out.violate(9, "%s: %s is owned by neither %s nor %s", when, key, r.wf, fork)
		case got[0] != owner(key):
			out.violate(9, "%s: %s is owned by %s, not %s", when, key, got[0], owner(key))
		default:
			continue
		}
		wrong = append(wrong, key)
	}
	r.note("%s: %d effects checked, %d misowned %v", when, len(effects), len(wrong), wrong)
}

// effectOwners are the runs among runs that own each tool action (an
// effect: model turns are spending, and stay their run's), by key.
func (l chaosLedger) effectOwners(ctx context.Context, runs ...string) (map[string][]string, error) {
	conn, err := l.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT idempotency_key, workflow_id FROM actions WHERE kind = 'tool' AND workflow_id = ANY($1) ORDER BY workflow_id`, runs)
	if err != nil {
		return nil, fmt.Errorf("read the owners of the effects of %v: %w", runs, err)
	}
	owners := map[string][]string{}
	for rows.Next() {
		var key, owner string
		if err := rows.Scan(&key, &owner); err != nil {
			return nil, fmt.Errorf("read the owners of the effects of %v: %w", runs, err)
		}
		owners[key] = append(owners[key], owner)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the owners of the effects of %v: %w", runs, err)
	}
	return owners, nil
}
