package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/compensation"
	"github.com/agentsaga/agentsaga/internal/payload"
	"github.com/agentsaga/agentsaga/internal/runbudget"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// TaskQueue is where agentsaga workers poll.
const TaskQueue = "agentsaga"

// ErrTypeRunFailed is the error type of a run that ended failed; its
// details hold the RunResult.
const ErrTypeRunFailed = "RunFailed"

// QueryBudget is the query that returns the run's BudgetView.
const QueryBudget = "budget"

// defaultSystemPrompt is used when the spec sets none.
const defaultSystemPrompt = "You are an agent working toward the user's goal. Call the tools when they help. " +
	"When you are done, answer in plain text without calling a tool. Each turn ends with a note of the budget " +
	"you have left: plan within it."

// finishInstructions replace the usual ones once the budget is nearly
// spent: a hard switch, not a hint. They are the budget note's finish
// instruction (runbudget.FinishInstruction, one text for both) and the shape
// the reply must take, which the workflow reads back.
const finishInstructions = runbudget.FinishInstruction + " No tools are available any more. " +
	"Reply in exactly two parts. First a line starting with \"PARTIAL ANSWER:\" followed by the best answer the " +
	"results so far support. Then a line starting with \"HANDOFF NOTE:\"."

// RunResult is how a run ended.
type RunResult struct {
	Status      string       `json:"status"`
	Answer      string       `json:"answer,omitempty"`
	HandoffNote string       `json:"handoff_note,omitempty"`
	Reason      string       `json:"reason,omitempty"`
	Usage       budget.Usage `json:"usage"`
	Retries     RetryStats   `json:"retries"`
	// Trace holds the last entries (at most traceTail); TraceEntries counts
	// them all. The whole conversation is in the ledger (agentsaga show).
	Trace        []TraceEntry `json:"trace"`
	TraceEntries int          `json:"trace_entries"`
	// Saga reports the compensation walk, when there was one.
	Saga *compensation.Report `json:"saga,omitempty"`
}

// RetryStats is what retrying cost the run.
type RetryStats struct {
	// Calls counts logical calls: model turns and tool calls.
	Calls       int            `json:"calls"`
	Retries     int            `json:"retries"`
	ToolRetries map[string]int `json:"tool_retries,omitempty"`
	// Denials counts refused retries by the budget that refused them.
	Denials map[string]int `json:"denials,omitempty"`
	// Amplification is leaf calls per logical call.
	Amplification float64 `json:"amplification"`
}

// TraceEntry is one model turn or tool call, in the order the run made them.
type TraceEntry struct {
	Step       int    `json:"step"`
	ActivityID string `json:"activity_id,omitempty"`
	Kind       string `json:"kind"` // "model", "tool", "agent" or "compensation"
	Tool       string `json:"tool,omitempty"`
	Arguments  string `json:"arguments,omitempty"`
	// Output is a preview (at most textclip.PreviewBytes); the whole
	// output is in the ledger, under the call's key.
	Output string `json:"output,omitempty"`
	// Digest identifies the whole output.
	Digest   string `json:"digest,omitempty"`
	Error    string `json:"error,omitempty"`
	Replayed bool   `json:"replayed,omitempty"`
	// Attempts is the leaf calls this call took.
	Attempts int `json:"attempts,omitempty"`
	// Denial names the budget that refused a retry, if one did.
	Denial string `json:"denial,omitempty"`
	// Note is the budget note the model read on this turn.
	Note string `json:"note,omitempty"`
	// Model, on a model turn that was answered, is the model that
	// answered it (agentsagatype.ModelSpec.Target): the spec's model or a
	// fallback.
	Model string `json:"model,omitempty"`
	// Parks counts the times the call waited behind its dependency's open
	// circuit breaker.
	Parks int `json:"parks,omitempty"`
	// QuotaWaits counts the times a model turn waited for its provider's
	// quota, and QuotaWaitSeconds how long in all.
	QuotaWaits       int     `json:"quota_waits,omitempty"`
	QuotaWaitSeconds float64 `json:"quota_wait_seconds,omitempty"`
	// Approval, on a call that waited for a human, is the decision and
	// who made it ("approved by alice").
	Approval string `json:"approval,omitempty"`
}

// BudgetView is what the budget query returns.
type BudgetView struct {
	Limits       budget.Limits    `json:"limits"`
	Used         budget.Usage     `json:"used"`
	Remaining    budget.Remaining `json:"remaining"`
	FractionLeft float64          `json:"fraction_left"`
	ShouldFinish bool             `json:"should_finish"`
	Note         string           `json:"note"`
	Retries      RetryStats       `json:"retries"`
}

// AgentRun runs one agent: model turn, then the tool calls that turn asked
// for, then their results back to the model, until the model answers or the
// budget runs low, when it finishes gracefully with a partial answer and a
// handoff note.
func AgentRun(ctx workflow.Context, spec RunSpec) (RunResult, error) {
	// A resolved spec was validated by the client that started the run,
	// against the rules of its day; validating it again here would let a
	// stricter rule break a run in flight.
	if spec.Version == 0 {
		if err := spec.Validate(); err != nil {
			return RunResult{}, temporal.NewNonRetryableApplicationError("spec: "+err.Error(), "InvalidSpec", nil)
		}
	}
	carried := spec.Carried
	spec.Carried = nil
	start := workflow.Now(ctx)
	if carried != nil {
		start = carried.Start
	}
	r, err := newRun(spec, workflow.GetInfo(ctx).WorkflowExecution.ID, start)
	if err != nil {
		return RunResult{}, temporal.NewNonRetryableApplicationError("spec: "+err.Error(), "InvalidSpec", nil)
	}
	r.ui.progressShown = workflow.GetInfo(ctx).WorkflowStartTime
	if carried != nil {
		r.resume(*carried)
	}
	if err := r.registerQueries(ctx); err != nil {
		return RunResult{}, err
	}
	if err := r.humans.registerUpdates(ctx); err != nil {
		return RunResult{}, err
	}
	if err := r.humans.registerApprovalUpdates(ctx, &r.versions); err != nil {
		return RunResult{}, err
	}
	r.humans.forkStop = workflow.GetSignalChannel(ctx, wire.SignalStopForFork)
	r.versions = readVersions(ctx)
	r.watchdog.namesRules = r.versions.effectsProgress
	if carried == nil {
		r.humans.Deadlines = r.versions.deadlines
	}
	if carried == nil {
		specJSON, err := json.Marshal(spec)
		if err != nil {
			return RunResult{}, err
		}
		start := agentsagatype.Run{Goal: spec.Goal, Spec: specJSON}
		if parent := workflow.GetInfo(ctx).ParentWorkflowExecution; parent != nil {
			start.ParentWorkflowID = parent.ID
		}
		if err := r.bookkeeping(ctx, "run-start", wire.ActivityRecordRunStart, start); err != nil {
			return RunResult{}, err
		}
		// A sub-agent is part of its parent's admitted run, and draws on
		// its reservation.
		if r.versions.admission && spec.Budget.Account != "" && start.ParentWorkflowID == "" {
			why, err := r.admit(ctx, specKey(spec))
			if err != nil {
				return RunResult{}, err
			}
			if why != "" {
				return r.failAtStart(ctx, why)
			}
		}
		if err := r.listMCPTools(ctx, &spec); err != nil {
			return r.failAtStart(ctx, err.Error())
		}
		r.conv.say(agentsagatype.Message{Role: "system", Content: r.spec.System, Pinned: true})
		r.conv.say(agentsagatype.Message{Role: "user", Content: spec.Goal, Pinned: true})
	}

	// A fork is admitted before its first live turn (r.admit). One that
	// never got in owns what it inherited all the same, and walks it back
	// as a run that failed at its first live step would.
	var notAdmitted string
	if carried != nil && carried.ForkedFrom != "" && r.versions.forkAdmission && spec.Budget.Account != "" {
		if notAdmitted, err = r.admit(ctx, forkSpecKey(spec, r.conv.Step)); err != nil {
			return RunResult{}, err
		}
	}
	var result RunResult
	var next *Carried
	if notAdmitted != "" {
		result = r.unwind(ctx, true, notAdmitted, "", "")
	} else {
		result, next = r.loop(ctx)
	}
	if next != nil {
		// History is long: the run goes on in a new execution of the same
		// workflow ID, carrying its state and nothing that grows.
		if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
			return RunResult{}, err
		}
		spec.Carried = next
		if payload.Check("the state carried across continue-as-new", spec) != nil {
			next.Trace = nil // the tail of previews is what can be spared
		}
		if err := payload.Check("the state carried across continue-as-new", spec); err != nil {
			return RunResult{}, err
		}
		// A run pinned to its build moves to the deployment's current build
		// here (an auto-upgrade run moved at its last workflow task), on a
		// server that supports upgrade on continue-as-new.
		return RunResult{}, workflow.NewContinueAsNewErrorWithOptions(ctx, workflow.ContinueAsNewErrorOptions{
			InitialVersioningBehavior: workflow.ContinueAsNewVersioningBehaviorAutoUpgrade,
		}, AgentRun, spec)
	}
	r.showProgress(ctx, result.Status, result.Reason, r.note(ctx))

	// The ending is recorded even when the run was cancelled.
	finishCtx, _ := workflow.NewDisconnectedContext(ctx)
	if err := r.bookkeeping(finishCtx, "run-finish", wire.ActivityRecordRunFinish, wire.RunFinish{
		WorkflowID: r.workflowID,
		Outcome: agentsagatype.RunOutcome{
			Status: result.Status, Answer: result.Answer, HandoffNote: result.HandoffNote, Reason: result.Reason,
			StepsUsed: result.Usage.Steps, TokensUsed: result.Usage.Tokens, USDSpent: result.Usage.USD,
			Calls: result.Retries.Calls, Retries: result.Retries.Retries,
		},
	}); err != nil {
		return RunResult{}, err
	}
	for len(result.Trace) > 0 && payload.Check("the run's result", result) != nil {
		result.Trace = result.Trace[1:] // the ledger has the whole run
	}
	if result.Status == agentsagatype.RunFailed {
		return result, temporal.NewNonRetryableApplicationError(result.Reason, ErrTypeRunFailed, nil, result)
	}
	return result, nil
}

// run is the core of one execution of AgentRun: the loop of turns, how
// the run ends, and what the turns share (the spec, the budget, the
// activity options). What it decides with is owned by its collaborators,
// each with its own fields and methods: the conversation, the book of
// calls, the watchdog, the humans, the waits, the trace and the UI; a
// turn's model turn (modelTurn) and tool calls (toolTurn) live as long as
// the turn.
type run struct {
	// spec is the run's resolved spec, read and never changed; its retry
	// policy has its defaults.
	spec       RunSpec
	workflowID string
	// versions says which side of each GetVersion change this execution
	// takes (versions.go).
	versions versions
	// continued counts the executions of this run before this one.
	continued int
	budget    *runbudget.RunBudget
	conv      conversation
	calls     callBook
	watchdog  *watchdog
	// humans is what the run waits on a human for, and what humans
	// decided (humans.go).
	humans humanWaits
	// waits is what the run's waits took, and the account's room (waits.go).
	waits waits
	trace trace
	// ui is what the Temporal UI was last shown (ui.go).
	ui uiState
}

// conversation is where the run is in its conversation with the model:
// the next step and the next message's place (keys and the conversation
// go on where they were), the messages the workflow produced that the
// next model call writes to the ledger, the model's latest text (for a
// partial answer), and whether it was told outputs were shortened (it is
// offered read_result from then on).
type conversation struct {
	Step, Seq   int
	Pending     []agentsagatype.Message
	LastContent string
	ReadBack    bool
}

// callBook is what the run's calls cost and met: the retry counters, the
// dependencies whose breaker was seen open (a tool's name, "model", or
// "model <provider:name>"), sorted, with since when the outage has lasted
// where a refusal said it, and the failed calls per tool, for escalation.
type callBook struct {
	Stats RetryStats `json:"stats"`
	breakers
	ToolFailures map[string]int `json:"tool_failures,omitempty"`
}

// breakers are the dependencies whose breaker was seen open.
type breakers struct {
	Open      []string             `json:"open,omitempty"`
	OpenSince map[string]time.Time `json:"open_since,omitempty"`
}

// trace holds the last traceTail entries of the run's trace; Traced
// counts them all.
type trace struct {
	Trace  []TraceEntry `json:"trace,omitempty"`
	Traced int          `json:"traced"`
}

// newRun is a run of spec at its first step, its budget's clock started at
// start; resume takes up what an earlier execution carried.
func newRun(spec RunSpec, workflowID string, start time.Time) (*run, error) {
	spec = spec.withRunDefaults()
	runBudget, err := runbudget.NewRunBudget(spec.Budget, spec.FinishAt, start)
	if err != nil {
		return nil, err
	}
	r := &run{
		spec: spec, workflowID: workflowID, budget: runBudget, conv: conversation{Step: 1},
		watchdog: newWatchdog(spec.Watchdog.NoProgressTurns),
		calls: callBook{
			Stats:        RetryStats{ToolRetries: map[string]int{}, Denials: map[string]int{}},
			ToolFailures: map[string]int{},
		},
		humans: humanWaits{Denied: map[string]string{}},
	}
	r.waits.run = r
	return r, nil
}

func (r *run) bookkeeping(ctx workflow.Context, activityID string, name string, arg any) error {
	if r.versions.localBookkeeping {
		// One idempotent statement: run in the workflow task, it needs no
		// task of its own. A local activity takes no ID of ours; its
		// marker in the history names the activity type.
		ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 30 * time.Second})
		return workflow.ExecuteLocalActivity(ctx, r.versions.activity(name), arg).Get(ctx, nil)
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: activityID, StartToCloseTimeout: 30 * time.Second})
	return workflow.ExecuteActivity(ctx, r.versions.activity(name), arg).Get(ctx, nil)
}

// loop runs turns until the run ends, or until its history is long enough
// to continue as new, when it returns the state to carry.
func (r *run) loop(ctx workflow.Context) (RunResult, *Carried) {
	var defs []agentsagatype.ToolDef
	for _, t := range r.spec.Tools {
		defs = append(defs, t.Def())
	}
	for ; ; r.conv.Step++ {
		step := r.conv.Step
		if ctx.Err() != nil {
			return r.rollback(ctx, "the run was cancelled", r.conv.LastContent, ""), nil
		}
		if result := r.stopForFork(ctx, step); result != nil {
			return *result, nil
		}
		if r.historyIsLong(ctx) {
			state := r.carry()
			state.Continued++
			return RunResult{}, &state
		}
		r.waits.book.newStep()
		now := workflow.Now(ctx)
		if dimension := r.budget.Exhausted(now); dimension != "" {
			return r.outOfBudget(ctx, r.conv.LastContent, "", r.waits.budgetSpent(dimension)), nil
		}
		if r.budget.ShouldFinish(now) {
			return r.gracefulFinish(ctx, step, r.conv.LastContent, r.waits.finishingEarly(now)), nil
		}
		offered := defs
		if r.conv.ReadBack {
			offered = append(slices.Clone(defs), wire.ReadResultDef)
		}
		if result := r.conclude(ctx, r.turn(ctx, step, offered)); result != nil {
			return *result, nil
		}
	}
}

// turnOutcome is how a turn ended, the one thing the loop reads of it: the
// run goes on (the zero value), goes on once a human answers, or ends.
type turnOutcome struct {
	end turnEnd
	// why is what failed, why a human is asked, or what the watchdog found.
	why    string
	answer string // the model's answer (endAnswered)
	// capped is the spend cap that stopped the run (endSpendCap), and step
	// the step the run ends at (endSpendCap, endWatchdog).
	capped *spendCapStop
	step   int
}

type turnEnd int

const (
	goOn turnEnd = iota
	askHuman
	endCancelled
	endAnswered
	endFailed
	endSpendCap
	endWatchdog
	// endAborted: an approval's timeout aborted the run (on_timeout: abort).
	endAborted
)

// turn is one step of the run: a model turn, then the tool calls it asked
// for, their results queued for the next turn.
func (r *run) turn(ctx workflow.Context, step int, offered []agentsagatype.ToolDef) turnOutcome {
	turn, err := (&modelTurn{r: r}).take(ctx, step, offered, false)
	var parked *modelParkedError
	var capped *spendCapStop
	switch {
	case ctx.Err() != nil:
		return turnOutcome{end: endCancelled}
	case errors.As(err, &capped):
		return turnOutcome{end: endSpendCap, capped: capped, step: step}
	case errors.As(err, &parked):
		// Nothing of the turn was done: once a human resumes the run, the
		// next step makes it again.
		return turnOutcome{end: askHuman, why: parked.why}
	case isProtocolMismatch(err):
		// The server answers, in another protocol: no retry or wait can
		// help, and nothing is undone for it; a human fixes the spec's
		// base_url or provider and resumes. (Only activities that know
		// this error type send it, so no history recorded before this
		// branch takes it: it needs no version gate. The replay corpus's
		// protocol-mismatch-escalated run is recorded with it.)
		return turnOutcome{end: askHuman, why: fmt.Sprintf("The model at step %d does not speak its API: %s", step, errorText(err))}
	case err != nil:
		return turnOutcome{end: endFailed, why: fmt.Sprintf("model call at step %d failed: %s", step, errorText(err))}
	case turn.Refusal != "":
		// The refusal stays in the conversation (the model call recorded
		// it), so the model (and a script) moves on after the human's
		// instruction.
		return turnOutcome{end: askHuman, why: fmt.Sprintf("The model refused at step %d: %s", step, turn.Refusal)}
	case len(turn.ToolCalls) == 0:
		return turnOutcome{end: endAnswered, answer: turn.Content}
	}
	r.conv.LastContent = turn.Content
	out := (&toolTurn{r: r}).run(ctx, step, turn.ToolCalls)
	if ctx.Err() != nil {
		return turnOutcome{end: endCancelled}
	}
	return out
}

// conclude acts on a turn's outcome: it returns the run's result when the
// run ends, after a human's answer when one was asked, and nil when the
// run goes on.
func (r *run) conclude(ctx workflow.Context, out turnOutcome) *RunResult {
	var result RunResult
	switch out.end {
	case goOn:
		return nil
	case askHuman:
		return r.escalate(ctx, out.why)
	case endCancelled:
		result = r.rollback(ctx, "the run was cancelled", r.conv.LastContent, "")
	case endAnswered:
		result = r.end(agentsagatype.RunCompleted, out.answer, "the model answered")
	case endFailed:
		// Rolled back, and failed when there was nothing to undo.
		result = r.unwind(ctx, true, out.why, r.conv.LastContent, "")
	case endSpendCap:
		// With a turn paid from the cap's finishing reserve, where it
		// keeps one, or with the handoff note the engine writes without a
		// model call.
		if out.capped.refusal.FinishingReserve() {
			result = r.gracefulFinish(ctx, out.step, r.conv.LastContent, out.capped.finishingReason())
		} else {
			result = r.outOfBudget(ctx, r.conv.LastContent, "", out.capped.reason())
		}
	case endWatchdog:
		result = r.gracefulFinish(ctx, out.step, r.conv.LastContent, out.why)
	case endAborted:
		result = r.rollback(ctx, out.why, r.conv.LastContent, "")
	}
	return &result
}

// gracefulFinish spends one last model turn, with no tools and switched
// instructions, on a partial answer and a handoff note.
func (r *run) gracefulFinish(ctx workflow.Context, step int, lastContent, reason string) RunResult {
	turn, err := (&modelTurn{r: r}).take(ctx, step, nil, true)
	if capped := (*spendCapStop)(nil); errors.As(err, &capped) {
		return r.outOfBudget(ctx, lastContent, "", reason+"; "+capped.reason())
	}
	if err != nil || turn.Content == "" {
		return r.outOfBudget(ctx, lastContent, "", reason+"; the finishing turn produced nothing")
	}
	answer, note, found := strings.Cut(turn.Content, "HANDOFF NOTE:")
	if !found {
		note = ""
	}
	answer = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(answer), "PARTIAL ANSWER:"))
	return r.outOfBudget(ctx, answer, strings.TrimSpace(note), reason)
}

// traceTail bounds the trace the workflow keeps, answers in the trace
// query and returns in RunResult: the whole run is in the ledger.
const traceTail = 32

// note is the budget note at this moment, with the breakers that are
// open: what the model reads and the UI shows.
func (r *run) note(ctx workflow.Context) string {
	return r.budget.Note(workflow.Now(ctx), r.calls.openBreakers())
}

// plan is the retry allowance handed to one call. The run allowance counts
// the logical calls scheduled so far, this turn's included, so parallel
// calls of one turn share one allowance and pay against one counter.
func (r *run) plan(tool, dependency string) agentsagatype.RetryPlan {
	p := r.spec.Retry
	backoff := p.Backoff()
	// Voluntary retries (the model repeating a call) were charged in the
	// workflow, so they come off what the hook may still grant.
	return agentsagatype.RetryPlan{
		Tool: tool, Dependency: dependency, MaxAttempts: p.MaxAttempts,
		ToolRetryCap: p.ToolCap(tool) - r.watchdog.voluntary[tool],
		RunAllowance: p.RunAllowance(r.calls.Stats.Calls) - float64(r.watchdog.totalVoluntary()),
		BackoffBase:  backoff.Base, BackoffCap: backoff.Cap,
		Deadline: r.budget.Deadline(),
	}
}

// activityOptions caps each attempt's timeout by the time left before the
// run's deadline, and keeps Temporal's attempt cap in step with the hook's
// as a backstop.
func (r *run) activityOptions(ctx workflow.Context, activityID string, timeout time.Duration, summary string) workflow.ActivityOptions {
	if deadline := r.budget.Deadline(); !deadline.IsZero() {
		timeout = min(timeout, max(time.Second, deadline.Sub(workflow.Now(ctx))))
	}
	return workflow.ActivityOptions{
		ActivityID:          activityID,
		StartToCloseTimeout: timeout,
		Summary:             summary,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    r.spec.Retry.Backoff().Base,
			BackoffCoefficient: 2,
			MaximumInterval:    r.spec.Retry.Backoff().Cap,
			MaximumAttempts:    int32(r.spec.Retry.MaxAttempts),
		},
	}
}

func (r *run) end(status, answer, reason string) RunResult {
	return RunResult{Status: status, Answer: answer, Reason: reason, Usage: r.budget.Used, Retries: r.calls.finalStats(r.budget.Used.LeafCalls),
		Trace: r.trace.Trace, TraceEntries: r.trace.Traced}
}

// partial ends a run whose budget ran low, with what it has and a handoff
// note: the model's, when it wrote one, followed by the engine's record of
// what succeeded and what failed.
func (r *run) partial(answer, modelNote, reason string) RunResult {
	result := r.end(agentsagatype.RunPartial, answer, reason)
	var done, failed []string
	for _, e := range r.trace.Trace {
		if e.Kind != "tool" && e.Kind != "agent" {
			continue
		}
		if e.Error != "" {
			failed = append(failed, fmt.Sprintf("%s %s (%s)", e.Tool, clip(e.Arguments, 60), clip(e.Error, 80)))
		} else {
			done = append(done, e.Tool+" "+clip(e.Arguments, 60))
		}
	}
	var note strings.Builder
	if modelNote != "" {
		fmt.Fprintf(&note, "%s\n\n", modelNote)
	}
	fmt.Fprintf(&note, "Stopped after %d model turns: %s.", r.budget.Used.Steps, reason)
	fmt.Fprintf(&note, " Tool calls that succeeded: %s.", listOrNone(done))
	fmt.Fprintf(&note, " Tool calls that failed: %s.", listOrNone(failed))
	fmt.Fprintf(&note, " Retries: %d over %d calls.", r.calls.Stats.Retries, r.calls.Stats.Calls)
	result.HandoffNote = note.String()
	return result
}

// toolNames lists the spec's tools, for a model that asked for another.
func (s RunSpec) toolNames() string {
	names := make([]string, len(s.Tools))
	for i, t := range s.Tools {
		names[i] = t.Name
	}
	return listOrNone(names)
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// markOpen notes that dependency's breaker was seen open, since when the
// outage has lasted when that is known (a zero since keeps what was known).
func (b *callBook) markOpen(dependency string, since time.Time) {
	if i, found := slices.BinarySearch(b.Open, dependency); !found {
		b.Open = slices.Insert(b.Open, i, dependency)
	}
	if known := b.OpenSince[dependency]; since.IsZero() || (!known.IsZero() && known.Before(since)) {
		since = known
	}
	if !since.IsZero() {
		if b.OpenSince == nil {
			b.OpenSince = map[string]time.Time{}
		}
		b.OpenSince[dependency] = since
	}
}

// markClosed notes that a call to dependency went through.
func (b *callBook) markClosed(dependency string) {
	if i, found := slices.BinarySearch(b.Open, dependency); found {
		b.Open = slices.Delete(b.Open, i, i+1)
	}
	delete(b.OpenSince, dependency)
}

// openBreakers names the dependencies whose breaker is open, for the
// model's note and the UI: each is down, since when when that is known.
func (b *callBook) openBreakers() []string {
	open := make([]string, 0, len(b.Open))
	for _, dependency := range b.Open {
		if since := b.OpenSince[dependency]; !since.IsZero() {
			dependency += " (down since " + since.UTC().Format("15:04:05") + " UTC)"
		}
		open = append(open, dependency)
	}
	return open
}

// finalStats are the retry counters, with the amplification of leafCalls.
func (b *callBook) finalStats(leafCalls int) RetryStats {
	stats := b.Stats
	if stats.Calls > 0 {
		stats.Amplification = float64(leafCalls) / float64(stats.Calls)
	}
	return stats
}

// charge books a finished call's leaf calls and retries against the run
// (its budget), in a run that parks calls behind an open breaker or not.
func (b *callBook) charge(tool string, entry *TraceEntry, spent *runbudget.RunBudget, parks bool) {
	if (!parks || entry.Denial != budget.DenyCircuitOpen) && entry.Denial != budget.DenySpendCap {
		entry.Attempts = max(entry.Attempts, 1)
	}
	spent.Spend(budget.Usage{LeafCalls: entry.Attempts})
	if retries := entry.Attempts - 1; retries > 0 {
		b.Stats.Retries += retries
		b.Stats.ToolRetries[tool] += retries
	}
	if entry.Denial != "" {
		b.Stats.Denials[entry.Denial]++
	}
	switch {
	case entry.Denial == budget.DenyCircuitOpen:
		b.markOpen(tool, time.Time{})
	case entry.Error == "":
		b.markClosed(tool)
	}
}

// record adds an entry to the trace, keeping the last traceTail.
func (t *trace) record(entries ...TraceEntry) {
	t.Traced += len(entries)
	t.Trace = append(t.Trace, entries...)
	if over := len(t.Trace) - traceTail; over > 0 {
		t.Trace = slices.Delete(t.Trace, 0, over)
	}
}

// say queues a message the workflow itself produced (the goal, a human's
// instruction, a failed call's error) at the next place in the
// conversation; the next model call writes it to the ledger.
func (c *conversation) say(m agentsagatype.Message) {
	m.Seq = c.Seq
	c.Seq++
	c.Pending = append(c.Pending, m)
}
