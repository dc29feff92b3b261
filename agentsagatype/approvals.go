package agentsagatype

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Approval rules (ApprovalSpec.When) besides an expression.
const (
	ApprovalAlways = "always"
	ApprovalNever  = "never"
)

// What a run does when nobody decides on an approval in time
// (ApprovalSpec.OnTimeout).
const (
	// ApprovalTimeoutEscalate escalates the run; the request stays open, so
	// a human may still approve or deny it, and the model's next identical
	// call picks up the decision.
	ApprovalTimeoutEscalate = "escalate"
	// ApprovalTimeoutFail ends the run: it fails and walks its
	// compensations, naming the call nobody approved.
	ApprovalTimeoutFail = "fail"
)

// DefaultApprovalTimeout is how long a call waits for a human when the
// spec does not say: a working day and a night.
const DefaultApprovalTimeout = 24 * time.Hour

// ApprovalSpec says when a call of a tool waits for a human's yes before it
// is sent. In a spec it is an object, or just its rule: "approval":
// "always". A tool marked irreversible needs approval always unless its
// spec says "never".
type ApprovalSpec struct {
	// When is "always", "never", or a CEL condition on the call's
	// arguments (amount > 100): the call waits when it holds, and when it
	// cannot be evaluated (a missing argument).
	When string `json:"when"`
	// TimeoutSeconds bounds the wait; DefaultApprovalTimeout when 0. The
	// run's wall-clock budget does not run while it waits.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// OnTimeout is ApprovalTimeoutEscalate (the default) or
	// ApprovalTimeoutFail.
	OnTimeout string `json:"on_timeout,omitempty"`
}

// UnmarshalJSON takes the object, or a string that is its rule. An unknown
// field is an error, as everywhere in a spec: a custom decoder does not
// inherit the outer one's DisallowUnknownFields.
func (a *ApprovalSpec) UnmarshalJSON(data []byte) error {
	var rule string
	if json.Unmarshal(data, &rule) == nil {
		*a = ApprovalSpec{When: rule}
		return nil
	}
	type plain ApprovalSpec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode((*plain)(a)); err != nil {
		return fmt.Errorf("approval: %w", err)
	}
	return nil
}

// Timeout is how long a call waits for a decision.
func (a ApprovalSpec) Timeout() time.Duration {
	if a.TimeoutSeconds <= 0 {
		return DefaultApprovalTimeout
	}
	return time.Duration(a.TimeoutSeconds * float64(time.Second))
}

// Validate checks what it can without the tool's schema; the condition
// itself is compiled with the tool's (workflows.RunSpec.Validate).
func (a ApprovalSpec) Validate() error {
	switch {
	case strings.TrimSpace(a.When) == "":
		return fmt.Errorf("approval.when: empty (%q, %q or a condition such as amount > 100)", ApprovalAlways, ApprovalNever)
	case a.TimeoutSeconds < 0:
		return fmt.Errorf("approval.timeout_seconds: %v is negative", a.TimeoutSeconds)
	case a.OnTimeout != "" && a.OnTimeout != ApprovalTimeoutEscalate && a.OnTimeout != ApprovalTimeoutFail:
		return fmt.Errorf("approval.on_timeout: %q is not %q or %q", a.OnTimeout, ApprovalTimeoutEscalate, ApprovalTimeoutFail)
	}
	return nil
}

// LimitSpec is a limit on a tool's arguments that no model output can lift:
// Call bounds each call; RunSum and AtMost bound a total over the run.
// Exactly one of Call and RunSum is set.
type LimitSpec struct {
	// Call is a CEL condition each call's arguments must meet
	// (amount <= 100). A call that does not meet it, or that it cannot be
	// evaluated on, is refused before it is sent.
	Call string `json:"call,omitempty"`
	// Approvable lets a human's approval lift the Call limit for one call:
	// the call waits for approval instead of being refused.
	Approvable bool `json:"approvable,omitempty"`
	// RunSum is a CEL amount (amount) summed over the run's calls of the
	// tool that completed, or may have, and were not compensated, with
	// the new call's; the total may not pass AtMost. No approval lifts it.
	RunSum string  `json:"run_sum,omitempty"`
	AtMost float64 `json:"at_most,omitempty"`
	// Escalate makes a call refused by this limit escalate the run, beside
	// telling the model why.
	Escalate bool `json:"escalate,omitempty"`
}

// Name is how the limit is named to the model, in the ledger and in
// errors: its expression.
func (l LimitSpec) Name() string {
	if l.RunSum != "" {
		return fmt.Sprintf("sum(%s) <= %v", l.RunSum, l.AtMost)
	}
	return l.Call
}

// Validate checks the limit's shape; its expression is compiled with the
// tool's schema (workflows.RunSpec.Validate).
func (l LimitSpec) Validate() error {
	switch {
	case (l.Call == "") == (l.RunSum == ""):
		return fmt.Errorf("set exactly one of call (a condition per call) and run_sum (an amount summed over the run)")
	case l.RunSum != "" && l.Approvable:
		return fmt.Errorf("run_sum %q: approvable applies to call limits only; no approval lifts a run's limit", l.RunSum)
	case l.RunSum != "" && l.AtMost < 0:
		return fmt.Errorf("run_sum %q: at_most %v is negative", l.RunSum, l.AtMost)
	case l.Call != "" && l.AtMost != 0:
		return fmt.Errorf("call %q: at_most applies to run_sum limits; write the bound into the condition", l.Call)
	}
	return nil
}

// Statuses of an approval request.
const (
	ApprovalAwaiting = "awaiting-approval"
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	// ApprovalTimedOut: nobody decided in time and the spec said to fail
	// the run (an escalating timeout leaves the request awaiting).
	ApprovalTimedOut = "timed-out"
)

// ApprovalRequest is a call waiting for a human, as the ledger records it
// under the call's idempotency key before anything is sent.
type ApprovalRequest struct {
	Key        string `json:"key"`
	WorkflowID string `json:"workflow_id"`
	// Call is the call's ID, which approve and deny name: its activity ID.
	Call      string `json:"call"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	// Why says what made the call need approval: the tool's rule, or the
	// per-call limit it is over.
	Why string `json:"why"`
}

// Approval is an approval request with its decision so far.
type Approval struct {
	ApprovalRequest
	Status      string    `json:"status"`
	RequestedAt time.Time `json:"requested_at"`
	DecidedBy   string    `json:"decided_by,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	DecidedAt   time.Time `json:"decided_at,omitzero"`
}
