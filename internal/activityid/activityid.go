package activityid

import "fmt"

// The grammar. An activity ID is the second half of every
// idempotency key (Key), and the workflow's histories record it: a
// string built here that changed would give a call a second key, and
// replay a history as a different one. So every ID the engine gives an
// activity is built here, and nowhere else.
//
//	step-003-model                       a step's model turn
//	step-003-finish                      the graceful finish, in place of step 3's turn
//	step-003-call-1-search               the first tool call of step 3
//	step-003-call-1-search/give-up       an activity beside a call (Sub)
//	step-003-call-1-search/after-breaker-2   the call sent a second time after a wait

// Model names a step's model call.
func Model(step int) string { return fmt.Sprintf("step-%03d-model", step) }

// Finish names the graceful-finish model call, made instead of
// step's turn.
func Finish(step int) string { return fmt.Sprintf("step-%03d-finish", step) }

// Tool names the call-th tool call of a step, e.g.
// step-003-call-1-search. With the workflow ID it is the idempotency key.
func Tool(step, call int, tool string) string {
	return fmt.Sprintf("step-%03d-call-%d-%s", step, call, tool)
}

// Kind is what an activity beside a call is (Sub). The
// first five send the call again, under its first key, after a wait or to
// another model; the others do something for it.
type Kind string

const (
	AfterBreaker  Kind = "after-breaker"   // a tool call or turn, once its breaker lets it through
	AfterQuota    Kind = "after-quota"     // a model turn, once its provider's quota has room
	AfterSpend    Kind = "after-spend"     // a model turn, once its account's spend cap has room
	AfterSpendCap Kind = "after-spend-cap" // a tool call, once its account's spend cap has room
	Fallback      Kind = "fallback"        // a model turn, to the spec's n-th fallback model
	Limit         Kind = "limit"           // a call's n-th per-run limit, held in the ledger
	Approval      Kind = "approval"        // a call's approval, recorded in the ledger
	ApprovalTimer Kind = "approval-timeout"
	GiveUp        Kind = "give-up"    // a failed call's key, fenced
	Compensate    Kind = "compensate" // a call's undo
	Retry         Kind = "retry"      // an undo's n-th retry by a human
)

// Sub names an activity beside the call with activity ID call:
// call/kind, or call/kind-n when n is not 0 (the n-th of its kind).
func Sub(call string, kind Kind, n int) string {
	if n == 0 {
		return call + "/" + string(kind)
	}
	return fmt.Sprintf("%s/%s-%d", call, kind, n)
}

// Compensation is the activity ID of the compensation of the forward call
// with activity ID forward, retry being the human retries before it (0 the
// first time). With the workflow ID it makes the compensation's idempotency
// key, <forward key>/compensate: derived, not generated, so every attempt
// of every worker names the same compensation. Each human retry gets a key
// of its own (<forward key>/compensate/retry-n): a compensation that was
// answered with a definitive no (a 4xx) would otherwise get that stored
// answer back forever. The ledger keeps every attempt's row.
func Compensation(forward string, retry int) string {
	id := Sub(forward, Compensate, 0)
	if retry == 0 {
		return id
	}
	return Sub(id, Retry, retry)
}

// Key is the idempotency key of a call: the run's workflow ID and the
// activity ID the workflow gave the call's first activity. It never
// involves the run ID or the attempt, so every attempt, retry and
// continuation of the run that sends the call shares it.
func Key(workflowID, activityID string) string {
	return workflowID + "/" + activityID
}
