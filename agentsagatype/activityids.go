package agentsagatype

import "fmt"

// The activity-ID grammar. An activity ID is the second half of every
// idempotency key (CallKey), and the workflow's histories record it: a
// string built here that changed would give a call a second key, and
// replay a history as a different one. So every ID the engine gives an
// activity is built here, and nowhere else.
//
//	step-003-model                       a step's model turn
//	step-003-finish                      the graceful finish, in place of step 3's turn
//	step-003-call-1-search               the first tool call of step 3
//	step-003-call-1-search/give-up       an activity beside a call (SubActivityID)
//	step-003-call-1-search/after-breaker-2   the call sent a second time after a wait

// ModelActivityID names a step's model call.
func ModelActivityID(step int) string { return fmt.Sprintf("step-%03d-model", step) }

// FinishActivityID names the graceful-finish model call, made instead of
// step's turn.
func FinishActivityID(step int) string { return fmt.Sprintf("step-%03d-finish", step) }

// ToolActivityID names the call-th tool call of a step, e.g.
// step-003-call-1-search. With the workflow ID it is the idempotency key.
func ToolActivityID(step, call int, tool string) string {
	return fmt.Sprintf("step-%03d-call-%d-%s", step, call, tool)
}

// SubActivity is what an activity beside a call is (SubActivityID). The
// first five send the call again, under its first key, after a wait or to
// another model; the others do something for it.
type SubActivity string

const (
	SubAfterBreaker  SubActivity = "after-breaker"   // a tool call or turn, once its breaker lets it through
	SubAfterQuota    SubActivity = "after-quota"     // a model turn, once its provider's quota has room
	SubAfterSpend    SubActivity = "after-spend"     // a model turn, once its account's spend cap has room
	SubAfterSpendCap SubActivity = "after-spend-cap" // a tool call, once its account's spend cap has room
	SubFallback      SubActivity = "fallback"        // a model turn, to the spec's n-th fallback model
	SubLimit         SubActivity = "limit"           // a call's n-th per-run limit, held in the ledger
	SubApproval      SubActivity = "approval"        // a call's approval, recorded in the ledger
	SubApprovalTimer SubActivity = "approval-timeout"
	SubGiveUp        SubActivity = "give-up"    // a failed call's key, fenced
	SubCompensate    SubActivity = "compensate" // a call's undo
	SubRetry         SubActivity = "retry"      // an undo's n-th retry by a human
)

// SubActivityID names an activity beside the call with activity ID call:
// call/kind, or call/kind-n when n is not 0 (the n-th of its kind).
func SubActivityID(call string, kind SubActivity, n int) string {
	if n == 0 {
		return call + "/" + string(kind)
	}
	return fmt.Sprintf("%s/%s-%d", call, kind, n)
}
