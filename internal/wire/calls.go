package wire

import (
	"encoding/json"
	"fmt"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"strings"
	"time"
)

// ModelCall is the input of CallModel. It carries references, not the
// conversation: the activity reads the messages from the ledger, fits them
// to the model's context budget, and records the reply there.
type ModelCall struct {
	Model        agentsagatype.ModelSpec `json:"model"`
	Conversation Conversation            `json:"conversation"`
	Tools        []agentsagatype.ToolDef `json:"tools,omitempty"`
	// Note is the budget note the model reads last; it is not stored.
	Note string `json:"note,omitempty"`
	// Finish marks the graceful-finish call (FinishInstructions follow the
	// note, and no tools are offered).
	Finish bool `json:"finish,omitempty"`
	// FinishInstructions are the switched instructions of a finish call.
	FinishInstructions string                  `json:"finish_instructions,omitempty"`
	Retry              agentsagatype.RetryPlan `json:"retry"`
	// Key, when set, is the turn's idempotency key in place of the
	// activity's own: a turn sent again after waiting for the model's
	// breaker, or sent to a fallback model, keeps the key of its first
	// activity.
	Key string `json:"key,omitempty"`
	// TurnOf, on a turn sent to a fallback model, is the spec's first
	// model (ModelSpec.Target). The key names the turn, the reply at its
	// place in the conversation, not one provider's request: the ledger
	// records the turn's action under the first model whichever model
	// answers it, so the key's request never changes, a reply already
	// stored for the turn is returned to every later attempt from either
	// model, and no second reply can be stored for it. The providers never
	// see the key.
	TurnOf string `json:"turn_of,omitempty"`
	// Quota admits the turn on its provider's quota, shared by the fleet,
	// before it is sent (runs from agentsaga-commands 3 on). A turn that
	// does not fit, or is answered 429, fails with a budget.DenyQuota
	// refusal whose CallFailure.RetryAt says when to send it again.
	Quota bool `json:"quota,omitempty"`
	// Spend, when set, charges the turn to an account: its claim reserves
	// the turn's most expensive outcome on the account's spend caps, and
	// its settle spends what the provider's usage cost. A turn the caps
	// cannot pay for fails with a budget.DenySpendCap refusal
	// (CallFailure.Spend) and sends nothing.
	Spend *SpendPlan `json:"spend,omitempty"`
}

// SpendPlan is what a model turn charged to an account needs to price
// itself: the account, and its model's prices in USD per million tokens.
// The output it reserves is the model's max_tokens.
type SpendPlan struct {
	Account          string  `json:"account"`
	InputPerMillion  float64 `json:"input_per_million"`
	OutputPerMillion float64 `json:"output_per_million"`
	// CachedInputPerMillion prices the input read from the provider's
	// cache (0: the input price).
	CachedInputPerMillion float64 `json:"cached_input_per_million,omitempty"`
	// CacheWritePerMillion prices the input written to the provider's
	// cache (0: 1.25 times the input price).
	CacheWritePerMillion float64 `json:"cache_write_per_million,omitempty"`
}

// SpendRefusal is the spend cap that refused a turn: the account it
// belongs to, what it allows a period and what was spent and reserved in
// this one, when it resets, and what the account does meanwhile
// (finish, wait or escalate).
type SpendRefusal struct {
	Account string  `json:"account"`
	Period  string  `json:"period"`
	USD     float64 `json:"usd"`
	// Room is what the refused turn could use of the cap: all of it for a
	// finishing turn, less the cap's finishing reserve otherwise.
	Room        float64   `json:"room"`
	Spent       float64   `json:"spent"`
	Reserved    float64   `json:"reserved"`
	Resets      time.Time `json:"resets"`
	OnExhausted string    `json:"on_exhausted"`
	// Needed is what the refused turn would have reserved.
	Needed float64 `json:"needed"`
	// Tool, for a refused tool call, is its tool (empty: a model turn).
	Tool string `json:"tool,omitempty"`
}

// Reason names the account, the cap and when it resets.
func (r SpendRefusal) Reason() string {
	kept := ""
	if r.FinishingReserve() {
		kept = fmt.Sprintf(" (its last $%.2f kept for finishing turns)", r.USD-r.RoomForTurns())
	}
	what := "the next turn"
	if r.Tool != "" {
		what = "a call of tool " + r.Tool
	}
	return fmt.Sprintf("the spend cap of account %s ($%.2f %s%s) has $%.2f spent and $%.2f reserved, and %s needs up to $%.4f; %s %s",
		r.Account, r.USD, SpendPer(r.Period), kept, r.Spent, r.Reserved, what, r.Needed, spendResets(r.Period), r.Resets.UTC().Format(time.RFC3339))
}

// SpendPer is how a cap's period reads after its amount: "a day" for a
// calendar period, "in any 24h" for a rolling window ("rolling 24h").
func SpendPer(period string) string {
	if window, rolling := RollingWindow(period); rolling {
		return "in any " + window
	}
	return "a " + period
}

// RollingWindow is the window of a rolling cap's period ("24h" of
// "rolling 24h"), and whether the period is one.
func RollingWindow(period string) (string, bool) { return strings.CutPrefix(period, "rolling ") }

// spendResets is how a cap's reset reads before its time: a calendar
// period resets; a rolling window frees room as its oldest spend leaves.
func spendResets(period string) string {
	if _, rolling := RollingWindow(period); rolling {
		return "room frees at"
	}
	return "it resets at"
}

// FinishingReserve says whether the cap keeps room that only a finishing
// turn may use: a run it stops can pay for one.
func (r SpendRefusal) FinishingReserve() bool { return r.RoomForTurns() < r.USD }

// RoomForTurns is Room, or the whole cap in a refusal recorded before
// Room was (the run's history replays as it ran).
func (r SpendRefusal) RoomForTurns() float64 {
	if r.Room > 0 {
		return r.Room
	}
	return r.USD
}

// ToolCallRequest is the input of CallTool.
type ToolCallRequest struct {
	Tool      agentsagatype.ToolSpec  `json:"tool"`
	Arguments string                  `json:"arguments"`
	Retry     agentsagatype.RetryPlan `json:"retry"`
	// Compensation is registered in the ledger before the tool is called.
	Compensation *CompensationRequest `json:"compensation,omitempty"`
	// Compensates is the forward key this call undoes, for a compensation:
	// a rollback fences forward calls, never these.
	Compensates string `json:"compensates,omitempty"`
	// Record, when set, is where the output goes in the run's
	// conversation: written in the statement that completes the action.
	Record *MessageRef `json:"record,omitempty"`
	// Key, when set, is the call's idempotency key in place of the
	// activity's own: a call sent again after waiting for a breaker keeps
	// the key of its first activity.
	Key string `json:"key,omitempty"`
	// Spend, when set, charges each attempt of the call to an account's
	// spend caps: reserved before it is sent, settled once it returns. An
	// attempt the caps cannot pay for sends nothing and fails with a
	// budget.DenySpendCap refusal (CallFailure.Spend).
	Spend *ToolSpend `json:"spend,omitempty"`
}

// ToolSpend is what each attempt of a priced tool call charged to an
// account costs: the spec's prices.tools entry, or prices.tool_call_usd.
type ToolSpend struct {
	Account string  `json:"account"`
	USD     float64 `json:"usd"`
}

// ToolResult is what a tool call produced, as history carries it: a
// preview and a digest of the output, whose whole is in the ledger.
type ToolResult struct {
	Output string `json:"output"`
	// Digest identifies the whole output; Bytes is its length.
	Digest string `json:"digest,omitempty"`
	Bytes  int    `json:"bytes,omitempty"`
	// Replayed is true when the ledger already held the result for this
	// key and the tool was not called again.
	Replayed bool `json:"replayed,omitempty"`
	// Attempt is the attempt that produced this result: the leaf calls the
	// call took.
	Attempt int `json:"attempt"`
}

// RunFinish is the input of RecordRunFinish.
type RunFinish struct {
	WorkflowID string                   `json:"workflow_id"`
	Outcome    agentsagatype.RunOutcome `json:"outcome"`
}

// GiveUp is the input of GiveUpCall: the call the workflow gives up on.
type GiveUp struct {
	Key        string `json:"key"`
	WorkflowID string `json:"workflow_id"`
	ActivityID string `json:"activity_id"`
	Tool       string `json:"tool"`
	Arguments  string `json:"arguments"`
}

// GaveUp is what the ledger knew of a call once the workflow gave up on it.
type GaveUp struct {
	// Status is the action's status: completed means a late attempt did the
	// call after all, and Preview and Digest are of what it returned.
	Status  string `json:"status"`
	Preview string `json:"preview,omitempty"`
	Digest  string `json:"digest,omitempty"`
	// LeafCalls counts the attempts that left the process, lost ones
	// included.
	LeafCalls int `json:"leaf_calls"`
}

// ReadResultRequest is the input of ReadResult.
type ReadResultRequest struct {
	WorkflowID string     `json:"workflow_id"`
	Key        string     `json:"key"`
	Record     MessageRef `json:"record"`
}

// RollbackPlanRequest is the input of RollbackPlan.
type RollbackPlanRequest struct {
	WorkflowID string `json:"workflow_id"`
	// IrreversibleTools are the tools whose effects cannot be undone.
	IrreversibleTools []string `json:"irreversible_tools,omitempty"`
}

// Settlement is the input of SettleCompensation.
type Settlement struct {
	ForwardKey string `json:"forward_key"`
	Status     string `json:"status"`
	Error      string `json:"error,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// RunStatus is the input of SetRunStatus.
type RunStatus struct {
	WorkflowID string `json:"workflow_id"`
	Status     string `json:"status"`
	Detail     string `json:"detail"`
}

// CallFailure travels as the details of every error the retry hook
// returns, so the workflow learns how many leaf calls a failed call took
// and which budget, if any, refused it.
type CallFailure struct {
	Attempt int    `json:"attempt"`
	Denial  string `json:"denial,omitempty"`
	// RetryAt, on a budget.DenyCircuitOpen denial, is when the call may go
	// out again. Refused at the gate, it is the release slot the gate
	// handed this call (ledgerdb.Gate.RetryAt): the parked calls come back
	// one per budget.BreakerConfig.ReleaseInterval, not in one wave. A
	// retry refused because the breaker had just opened comes back a
	// cooldown later, jittered by up to half of it, and takes a slot then.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// AtGate is set when the breaker refused this attempt before it was
	// made: the call made Attempt-1 leaf calls, not Attempt.
	AtGate bool `json:"at_gate,omitempty"`
	// OpenSince, on a refusal at the gate, is when this outage opened the
	// breaker (ledgerdb.Gate.OpenSince); zero when the hook could not tell.
	OpenSince time.Time `json:"open_since,omitzero"`
	// Spend, on a budget.DenySpendCap refusal, is the cap that refused the
	// turn; RetryAt is then when it resets.
	Spend *SpendRefusal `json:"spend,omitempty"`
}

// FindAbandoned is the input of FindAbandonedRuns: one page of the runs
// that have not ended.
type FindAbandoned struct {
	// OlderThan leaves out runs younger than this.
	OlderThan time.Duration `json:"older_than,omitempty"`
	// After is the last workflow ID of the previous page, "" for the first.
	After string `json:"after,omitempty"`
	Limit int    `json:"limit"`
}

// AbandonedRun is a run whose workflow ended outside the engine, marked
// terminated in the ledger, whose stack is to be walked.
type AbandonedRun struct {
	WorkflowID string `json:"workflow_id"`
	// Reason is Temporal's: the termination's reason, the timeout, or that
	// the workflow vanished.
	Reason string `json:"reason"`
	// Marked is false when an earlier pass marked it but did not get to
	// start its rollback.
	Marked bool `json:"marked"`
}

// AbandonedPage is what FindAbandonedRuns found on one page.
type AbandonedPage struct {
	Examined int `json:"examined"`
	// Live counts the runs whose workflow (or rollback) is still running.
	Live int `json:"live"`
	// Rollbacks are the runs to start a RollbackRun for.
	Rollbacks []AbandonedRun `json:"rollbacks,omitempty"`
	// Covered are sub-agents whose stack their parent's rollback walks.
	Covered []string `json:"covered,omitempty"`
	// Stalled are runs whose RollbackRun itself ended before it finished
	// them: the ledger now says needs-attention.
	Stalled []string `json:"stalled,omitempty"`
	// Errors are the runs that could not be examined this time.
	Errors []string `json:"errors,omitempty"`
	// Next is the After of the next page, "" when this was the last.
	Next string `json:"next,omitempty"`
}

// RollbackRequest is the input of StartRollback and of the RollbackRun
// workflow.
type RollbackRequest struct {
	// Reason is Temporal's reason, as marked in the ledger.
	Reason string `json:"reason"`
}

// TerminatedRun is what RollbackRun reads of the run it walks.
type TerminatedRun struct {
	Status   string `json:"status"`
	Reason   string `json:"reason"`
	Finished bool   `json:"finished"`
	// Spec is the run's workflows.RunSpec, as JSON.
	Spec json.RawMessage `json:"spec"`
	// What the run had spent, as far as the ledger knows.
	Outcome agentsagatype.RunOutcome `json:"outcome"`
}

// SubRunsFinish is the input of FinishSubRuns.
type SubRunsFinish struct {
	WorkflowID string `json:"workflow_id"`
	Status     string `json:"status"`
	Reason     string `json:"reason"`
}

// CallPlan reads an activity's input that carries a retry plan (a
// ModelCall or a ToolCallRequest, or a pointer to one), for the retry hook:
// the plan, with the release interval of the rate its dependency declares,
// and the idempotency key of the call's first activity ("" when the
// activity's own key is the call's); ok is false for any other input. It is
// a function, not methods of the two types, so that ToolCallRequest, which
// package activities makes public (activities.ToolCallRequest, for the
// workflows that schedule CallTool themselves), brings no methods into the
// public API.
func CallPlan(input any) (plan agentsagatype.RetryPlan, firstKey string, ok bool) {
	switch r := input.(type) {
	case ModelCall:
		return withRelease(r.Retry, r.Model.RateLimit), r.Key, true
	case *ModelCall:
		if r != nil {
			return withRelease(r.Retry, r.Model.RateLimit), r.Key, true
		}
	case ToolCallRequest:
		return withRelease(r.Retry, r.Tool.RateLimit), r.Key, true
	case *ToolCallRequest:
		if r != nil {
			return withRelease(r.Retry, r.Tool.RateLimit), r.Key, true
		}
	}
	return agentsagatype.RetryPlan{}, "", false
}

func withRelease(p agentsagatype.RetryPlan, l *agentsagatype.RateLimit) agentsagatype.RetryPlan {
	p.ReleaseInterval = releaseInterval(l)
	return p
}

// releaseInterval is the time between two requests at 95% of the declared
// request rate (zero when none is declared): at the rate itself, the
// jitter of timers and task queues puts an eleventh request into some
// second of a service that takes ten, which fails it, and three such
// failures in a row open the breaker again.
func releaseInterval(l *agentsagatype.RateLimit) time.Duration {
	if l == nil || l.RequestsPerMinute <= 0 {
		return 0
	}
	return time.Minute * 100 / time.Duration(95*l.RequestsPerMinute)
}

// RecordedApproval is the input of RecordedApproval: a replay's call that
// needs approval, and where its tool's recording is.
type RecordedApproval struct {
	Request   agentsagatype.ApprovalRequest `json:"request"`
	Recording agentsagatype.Recording       `json:"recording"`
}
