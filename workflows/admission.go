package workflows

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Admission by run (agentsaga-commands 9, issue 43): a run charged to an
// account is admitted whole before its first turn, when its account's
// caps can hold its estimate and its concurrency limits have a place, or
// it waits in the account's queue with status queued. The ledger decides
// (agentsaga_admission_enqueue); the workers' admission loops signal the
// runs a pass admitted, and the run asks the ledger again before it goes
// on, so a signal alone admits nothing.

// DefaultPriority is a run's place among priorities when its spec sets
// none: 1 goes first, 5 last.
const DefaultPriority = 3

// admissionRecheck is how long a queued run waits for the signal before
// it asks the ledger again, which also runs a pass: a worker killed
// between admitting a run and signalling it, or a fleet whose workers run
// no admission loop, delays a run by this much at most. Room that frees
// is signalled at once; this is the backstop, not the clock.
const admissionRecheck = 2 * time.Minute

// leaseMargin is how long past its wall clock an admitted run's
// reservation lives: a run that is still going then (resumed after an
// escalation) draws on the caps turn by turn.
const leaseMargin = time.Hour

// queueCancelledReason ends a run an operator took out of the queue.
const queueCancelledReason = "cancelled in the admission queue (agentsaga queue cancel): no turn was taken"

// admit waits until the ledger admits the run, and returns "", or the
// reason it ends without a turn: taken out of the queue, or cancelled
// while it waited. A run that waited starts its wall clock when it is
// admitted: the budget is for its work, not for the queue. key names the
// runs whose spend teaches this one its estimate.
//
// A new run is admitted before its first turn (commandsVersion9), and a
// fork before its first live turn (commandsVersion11): a fork is a new
// claim on its account's caps and places, for its live steps. Its key is
// its own (forkSpecKey), so that a fork's spend, which leaves out the
// steps it inherited, never teaches whole runs a smaller estimate.
func (r *run) admit(ctx workflow.Context, key string) (string, error) {
	req := wire.AdmitRequest{RunID: r.workflowID, Account: r.spec.Budget.Account, SpecKey: key,
		QuotaKey: r.spec.Model.Target(), Priority: cmp.Or(r.spec.Priority, DefaultPriority), BudgetUSD: r.spec.Budget.USD}
	if limit := r.spec.Model.RateLimit; limit != nil { // a model without a declared quota has none
		req.QuotaMax = limit.MaxConcurrentRuns
	}
	if r.spec.Budget.Seconds > 0 {
		req.LeaseMS = (time.Duration(r.spec.Budget.Seconds*float64(time.Second)) + leaseMargin).Milliseconds()
	}
	woken := workflow.GetSignalChannel(ctx, wire.SignalAdmitted)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second})
	for {
		var adm wire.Admission
		if err := workflow.ExecuteLocalActivity(lctx, r.versions.activity(wire.ActivityAdmitRun), req).Get(ctx, &adm); err != nil {
			if ctx.Err() != nil {
				return "cancelled while queued for admission: " + err.Error(), nil
			}
			return "", err
		}
		switch adm.Status {
		case wire.AdmissionAdmitted:
			if req.Waited {
				r.budget.Start = workflow.Now(ctx)
				r.showProgress(ctx, agentsagatype.RunRunning, "admitted after waiting in the queue of account "+req.Account,
					r.budget.Note(workflow.Now(ctx), nil))
			}
			return "", nil
		case wire.AdmissionQueued:
		default:
			return queueCancelledReason, nil
		}
		r.showProgress(ctx, agentsagatype.RunQueued,
			fmt.Sprintf("queued: place %d in the admission queue of account %s (priority %d, estimated at $%.4f): %s",
				adm.Place, req.Account, req.Priority, adm.EstimateUSD, adm.Reason),
			r.budget.Note(workflow.Now(ctx), nil))
		timerCtx, stopTimer := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(woken, func(c workflow.ReceiveChannel, _ bool) {
			for c.ReceiveAsync(nil) { // every signal sent so far is answered by the one ask below
			}
		})
		sel.AddFuture(workflow.NewTimerWithOptions(timerCtx, admissionRecheck,
			workflow.TimerOptions{Summary: "queued: ask the ledger again"}), func(workflow.Future) {})
		sel.Select(ctx)
		stopTimer()
		if err := ctx.Err(); err != nil {
			return "cancelled while queued for admission: " + err.Error(), nil
		}
		req.Waited = true
	}
}

// forkSpecKey identifies the forks of a spec at one step: they learn
// their estimate from one another, not from whole runs.
func forkSpecKey(spec RunSpec, step int) string {
	return fmt.Sprintf("%s/fork-at-%d", specKey(spec), step)
}

// specKey identifies a spec without its goal: the runs of one spec learn
// one cost estimate from what they spent.
func specKey(spec RunSpec) string {
	spec.Goal, spec.Carried, spec.Priority = "", nil, 0
	raw, err := json.Marshal(spec)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}
