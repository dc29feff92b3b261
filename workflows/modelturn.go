package workflows

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/payload"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// One model turn reads here and in waits.go, from the note the model
// reads to the turn's trace entry (take); its tool calls are a toolTurn
// (toolcalls.go). The turn goes to the spec's model or, when that one is
// down, to each fallback in order (ask); each send is admitted on its
// provider's quota and its account's spend cap, and waits them out
// (sendInQuota, with the waits' meetSpendCap, waitForSpendCap and
// waitOnce); a turn every model refused waits out the open breaker
// (waits.parkBehindBreaker), as a tool call does.

// modelTurn is one model turn in flight: it owns its IDs, its reply and
// what its sends met; r is the run whose conversation, budget, book of
// calls and trace the turn writes to.
type modelTurn struct {
	r                   *run
	activityID, summary string
	reply               agentsagatype.ModelTurn
	// The leaf calls the sends made that the last send's outcome does not
	// count: the requests the provider answered 429 (quota, with the
	// turn's waits for its quota), those of sends a down model refused
	// before the next model was asked (refusedLeafCalls), and those of
	// sends the breaker refused before the turn waited it out (parked).
	quota            quotaWaits
	refusedLeafCalls int
	parked           parkedCall
}

// take makes step's model turn, offering defs (none, and the finishing
// instructions, for a graceful finish): it writes what was pending to the
// conversation, records the turn's trace entry, charges its leaf calls and
// spends its tokens and price, and returns the reply, or the error that
// ended the turn (a *modelParkedError or a *spendCapStop when the run
// should ask a human or stop).
func (t *modelTurn) take(ctx workflow.Context, step int, defs []agentsagatype.ToolDef, finish bool) (agentsagatype.ModelTurn, error) {
	r := t.r
	r.calls.Stats.Calls++
	note := r.note(ctx)
	if account := r.waits.accountNote(); account != "" {
		note += "\n" + account
	}
	if warning := r.watchdog.note(); warning != "" {
		note += "\n" + warning
	}
	r.showProgress(ctx, agentsagatype.RunRunning, fmt.Sprintf("Step %d of at most %d.", step, r.budget.Limits.Steps), note)
	call := wire.ModelCall{
		Model:        r.spec.Model,
		Conversation: wire.Conversation{WorkflowID: r.workflowID, Append: r.conv.Pending, Through: r.conv.Seq},
		Tools:        defs, Note: note, Finish: finish,
		Retry: r.plan("model", modelDependency(r.spec.Model)),
	}
	if finish {
		call.Tools, call.FinishInstructions = nil, finishInstructions
	}
	model := r.spec.Model
	modelName := strings.TrimSpace(model.Provider + " " + model.Name)
	summary := fmt.Sprintf("model turn %d (%s)", step, modelName)
	activityID := activityid.Model(step)
	if finish {
		summary += ": graceful finish"
		activityID = activityid.Finish(step)
	}
	t.activityID, t.summary = activityID, summary
	turn := &t.reply
	err := payload.Check("model call "+activityID, call)
	if err == nil {
		err = t.ask(ctx, activityID, call, turn)
	}
	parked := &t.parked
	if _, refused := openBreakerRefusal(err); refused && r.versions.parkModelTurns {
		// The provider is down (every model of the turn, with fallbacks):
		// the turn waits for its breaker, as a tool call does, and goes
		// out again under its first key.
		call.Key = activityid.Key(r.workflowID, activityID)
		what, dependency := "the model "+modelName, "model"
		if models := t.turnModels(); len(models) > 1 {
			// ask notes each model as "model <target>": the wait
			// notes the primary's under the same name.
			what, dependency = fmt.Sprintf("the models %s", modelTargets(models)), "model "+model.Target()
		}
		err, *parked = r.waits.parkBehindBreaker(ctx, what, "the model's", dependency, activityID, err, func(ctx workflow.Context, again string) workflow.Future {
			call.Retry = r.plan("model", call.Retry.Dependency)
			call.Retry.Released = true
			*turn = agentsagatype.ModelTurn{}
			if len(t.turnModels()) == 1 {
				// One model: its send, as before fallbacks existed.
				return t.sendInQuota(ctx, again, summary, call)
			}
			asked, answered := workflow.NewFuture(ctx)
			workflow.Go(ctx, func(ctx workflow.Context) {
				var reply agentsagatype.ModelTurn
				err := t.ask(ctx, again, call, &reply)
				answered.Set(reply, err)
			})
			return asked
		}, turn)
		if err != nil && parked.escalation != "" {
			err = &modelParkedError{why: parked.escalation, err: err}
		}
	}
	if err == nil {
		// The reply is message r.conv.Seq now; what was pending is written.
		r.conv.Pending = nil
		r.conv.Seq++
		r.conv.ReadBack = r.conv.ReadBack || turn.Shortened > 0 || turn.OmittedTurns > 0
	}

	entry := TraceEntry{Step: step, ActivityID: activityID, Kind: "model", Output: textclip.Preview(turn.Content), Note: note}
	entry.Attempts, entry.Denial, entry.Parks = turn.Attempt+parked.leafCalls+t.refusedLeafCalls, "", parked.parks
	if err == nil {
		// A reply stored earlier says who answered it; one from before
		// AnsweredBy existed was the spec's model's.
		entry.Model = cmp.Or(turn.AnsweredBy, model.Target())
		r.ui.answeredBy = entry.Model
		r.waits.accountLeft = cmp.Or(turn.Account, r.waits.accountLeft)
	} else {
		entry.Error = errorText(err)
		entry.Attempts, entry.Denial = callFailure(err)
		if r.versions.parkModelTurns && entry.Denial == budget.DenyCircuitOpen {
			entry.Attempts = parked.leafCalls // a refusal at the gate was not a call
		}
		if entry.Denial == budget.DenyQuota || entry.Denial == budget.DenySpendCap {
			entry.Attempts = 0 // t.quota counts the requests answered 429; a spend cap's refusal sent nothing
		}
		entry.Attempts += t.refusedLeafCalls
	}
	entry.Attempts += t.quota.leafCalls
	entry.QuotaWaits, entry.QuotaWaitSeconds = t.quota.waits, t.quota.waited.Seconds()
	if turn.Refusal != "" {
		entry.Error = "refusal: " + turn.Refusal
	}
	for _, c := range turn.ToolCalls {
		entry.Output += fmt.Sprintf("\n-> %s %s", c.Name, clip(c.Arguments, 200))
	}
	r.calls.charge("model", &entry, r.budget, r.versions.parkOnOpenBreaker)
	// The turn is priced at the model that answered it.
	steps := 1
	if entry.Denial == budget.DenySpendCap {
		steps = 0 // the account could not pay for the turn: nothing was sent
	}
	r.budget.Spend(budget.Usage{Steps: steps, Tokens: turn.Usage.Total(),
		USD: r.spec.Prices.ModelUSD(t.modelNamed(entry.Model).Name, turn.Usage)})
	r.trace.record(entry)
	return *turn, err
}

// quotaWaits is how one model turn met its provider's quota: a wait is
// not a failure, so it costs no retry and no attempt, and a turn refused
// at admission sent nothing.
type quotaWaits struct {
	waits  int
	waited time.Duration
	// leafCalls are the requests the provider answered 429.
	leafCalls int
}

// ask sends a turn to the first of its models whose circuit breaker
// does not refuse it: the spec's model, then each fallback in order, each
// under activity ID <activityID>/fallback-N but all under the turn's first
// key (ModelCall.TurnOf says why that is safe). A model that is down costs
// the turn no wait: it goes to the next one at once. It returns the leaf
// calls that the sends refused by a down model made before they were
// refused, and the last send's outcome: a refusal only when every model
// refused the turn.
func (t *modelTurn) ask(ctx workflow.Context, activityID string, call wire.ModelCall, turn *agentsagatype.ModelTurn) (err error) {
	r, summary := t.r, t.summary
	models := t.turnModels()
	for i, model := range models {
		id, send, what := activityID, call, summary
		if i > 0 {
			id = activityid.Sub(activityID, activityid.Fallback, i)
			send.Model, send.TurnOf = model, r.spec.Model.Target()
			send.Key = cmp.Or(call.Key, activityid.Key(r.workflowID, activityID))
			send.Retry = r.plan("model", modelDependency(model))
			what = fmt.Sprintf("%s, on fallback %s", summary, model.Target())
		}
		*turn = agentsagatype.ModelTurn{}
		err = t.sendInQuota(ctx, id, what, send).Get(ctx, turn)
		failure, refused := openBreakerRefusal(err)
		var outOfQuota *modelParkedError
		if errors.As(err, &outOfQuota) && i < len(models)-1 {
			// The run cannot afford to wait for this model's quota: the
			// next model answers the turn.
			continue
		}
		if len(models) > 1 {
			// The note names each model that is down, and since when.
			if refused {
				r.calls.markOpen("model "+model.Target(), failure.OpenSince)
			} else {
				r.calls.markClosed("model " + model.Target())
			}
		}
		if !refused || i == len(models)-1 {
			return err
		}
		t.refusedLeafCalls += failure.Attempt
		if failure.AtGate {
			t.refusedLeafCalls-- // refused before it was made
		}
	}
	return err
}

// modelDependency is a model's circuit breaker's key.
func modelDependency(m agentsagatype.ModelSpec) string { return "model:" + m.Target() }

// modelTargets lists models as "a, then b".
func modelTargets(models []agentsagatype.ModelSpec) string {
	targets := make([]string, len(models))
	for i, m := range models {
		targets[i] = m.Target()
	}
	return strings.Join(targets, ", then ")
}

// modelParkedError is a model turn that waited for the model's open
// breaker until it could wait no longer: the run asks a human (why)
// instead of failing.
type modelParkedError struct {
	why string
	err error
}

func (e *modelParkedError) Error() string { return e.err.Error() }
func (e *modelParkedError) Unwrap() error { return e.err }

// sendInQuota sends a model turn under activityID, as
// sendModelTurn does, and from agentsaga-commands 3 on admits it on its
// provider's quota, which the fleet shares (ModelCall.Quota). While the
// quota refuses it (a budget.DenyQuota refusal: no room at admission, or a
// request answered 429, which closes the quota for every worker), the
// turn waits on a durable timer until the release slot the refusal names
// and goes out again under its first key, as <activityID>/after-quota-N.
// The slots are a refill of each call's cost apart and jittered, so the
// turns waiting on one quota come back at the rate it allows, not in a
// wave. The waits count against the run's wall clock: a wait the run's
// budget cannot afford ends the send with a modelParkedError that says
// why (ask then asks the next model, if the spec has fallbacks).
func (t *modelTurn) sendInQuota(ctx workflow.Context, activityID, summary string, call wire.ModelCall) workflow.Future {
	r := t.r
	if !r.versions.quotaWaits {
		return t.sendModelTurn(ctx, activityID, summary, call)
	}
	call.Quota = true
	sent, settle := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var turn agentsagatype.ModelTurn
		err := t.sendModelTurn(ctx, activityID, summary, call).Get(ctx, &turn)
		what, note := "the model "+call.Model.Target(), call.Note
		waited := 0
		for n := 1; ; n++ {
			if capped, ok := spendRefusalIn(err); ok {
				back, stop := r.waits.meetSpendCap(capped, err, workflow.Now(ctx), n)
				if stop != nil {
					err = stop
					break
				}
				waited++
				if timerErr := r.waits.waitForSpendCap(ctx, capped, activityID, back, n); timerErr != nil {
					err = timerErr // cancelled while waiting: nothing was sent
					break
				}
				call.Key = cmp.Or(call.Key, activityid.Key(r.workflowID, activityID))
				call.Retry = r.plan("model", call.Retry.Dependency)
				// The model reads that its account held the turn back.
				call.Note = fmt.Sprintf("%s\nThe spend cap of account %s ($%.2f %s) held this turn back until %s.",
					note, capped.Account, capped.USD, wire.SpendPer(capped.Period), back.UTC().Format("15:04:05 UTC"))
				turn = agentsagatype.ModelTurn{}
				err = t.sendModelTurn(ctx, activityid.Sub(activityID, activityid.AfterSpend, n), summary, call).Get(ctx, &turn)
				continue
			}
			refusal, refused := quotaRefusal(err)
			if !refused {
				break
			}
			t.quota.leafCalls += refusal.Attempt
			if refusal.AtGate {
				t.quota.leafCalls-- // refused before it was sent
			}
			now := workflow.Now(ctx)
			wait := parkWithoutProbeTime
			if !refusal.RetryAt.IsZero() {
				wait = max(refusal.RetryAt.Sub(now), minimumPark)
			}
			back := now.Add(wait)
			if r.budget.ShouldFinish(back) {
				why := fmt.Sprintf("The quota of %s has no room until %s, and the run's budget cannot afford the wait",
					what, back.UTC().Format(time.RFC3339))
				r.waits.book.stoppedWaiting(why, "the quota of "+what)
				err = &modelParkedError{err: err, why: why}
				break
			}
			waiting := fmt.Sprintf("waiting for the quota of %s: its provider's rate limit has no room; the turn goes out at %s (waited %d times)",
				what, back.UTC().Format(time.RFC3339), n)
			waited++
			t.quota.waits++
			t.quota.waited += wait
			if timerErr := r.waits.waitOnce(ctx, refusalWait{back: back, waiting: waiting, progress: "Call " + activityID + " is " + waiting,
				details: note + "\n" + waiting, summary: "waiting for the quota of " + what, cause: "the quota of " + what}, n); timerErr != nil {
				err = timerErr // cancelled while waiting: nothing was sent
				break
			}
			call.Key = cmp.Or(call.Key, activityid.Key(r.workflowID, activityID))
			call.Retry = r.plan("model", call.Retry.Dependency)
			// The model reads that its turn was held back, and for how long.
			call.Note = fmt.Sprintf("%s\nThe provider's rate limit held this turn back %s (until %s).",
				note, t.quota.waited.Round(time.Second), back.UTC().Format("15:04:05 UTC"))
			turn = agentsagatype.ModelTurn{}
			err = t.sendModelTurn(ctx, activityid.Sub(activityID, activityid.AfterQuota, n), summary, call).Get(ctx, &turn)
		}
		if waited > 0 && !temporal.IsCanceledError(err) {
			r.setStatus(ctx, agentsagatype.RunRunning, "") // no longer waiting
		}
		settle.Set(turn, err)
	})
	return sent
}

// quotaRefusal is the quota's refusal in err (budget.DenyQuota), when that
// is what err is.
func quotaRefusal(err error) (wire.CallFailure, bool) {
	failure, ok := callFailureIn(err)
	return failure, ok && failure.Denial == budget.DenyQuota
}

// turnModels are the models a turn may go to, in order: the spec's model,
// then its fallbacks (model.fallbacks, from agentsaga-commands 2).
func (t *modelTurn) turnModels() []agentsagatype.ModelSpec {
	r := t.r
	models := []agentsagatype.ModelSpec{r.spec.Model}
	if r.versions.modelFallbacks {
		models = append(models, r.spec.Model.Fallbacks...)
	}
	return models
}

// modelNamed is the turn model whose Target is target; the spec's model
// when none is (a turn answered before AnsweredBy was stored).
func (t *modelTurn) modelNamed(target string) agentsagatype.ModelSpec {
	r := t.r
	for _, m := range t.turnModels() {
		if m.Target() == target {
			return m
		}
	}
	return r.spec.Model
}

// sendModelTurn schedules a model turn under activityID: its first send
// and each send after waiting for the model's breaker.
func (t *modelTurn) sendModelTurn(ctx workflow.Context, activityID, summary string, call wire.ModelCall) workflow.Future {
	r := t.r
	call.Spend = t.spendPlan(call.Model) // each model at its own price
	actx := workflow.WithActivityOptions(ctx, r.activityOptions(ctx, activityID, 2*time.Minute, summary))
	actx = workflow.WithHeartbeatTimeout(actx, heartbeatTimeout(2*time.Minute))
	return workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityCallModel), call)
}

// spendPlan is what a turn on model m needs to reserve on the run's
// account, or nil when the run has none.
func (t *modelTurn) spendPlan(m agentsagatype.ModelSpec) *wire.SpendPlan {
	r := t.r
	if !r.versions.spendCaps || r.spec.Budget.Account == "" {
		return nil
	}
	price := r.spec.Prices.Models[m.Name]
	return &wire.SpendPlan{Account: r.spec.Budget.Account, InputPerMillion: price.InputPerMillion,
		OutputPerMillion: price.OutputPerMillion, CachedInputPerMillion: price.CachedInputPerMillion,
		CacheWritePerMillion: price.CacheWritePerMillion}
}
