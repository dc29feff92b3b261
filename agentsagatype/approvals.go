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

// What a run does when nobody answers a wait for a person in time (an
// approval rule's on_timeout, escalate.on_timeout). Every wait for a
// person has a deadline (DESIGN.md decision 22); these say what
// follows it.
const (
	// OnTimeoutDeny refuses the call as a human's deny would: it is not
	// sent, the model reads why (the timeout, and what the run published
	// while it waited), and the run goes on without it. An approval's
	// default from spec version 4.
	OnTimeoutDeny = "deny"
	// OnTimeoutAbort aborts the run as a human's abort would: it walks its
	// compensations backwards and ends compensated. An escalation's
	// default from spec version 4.
	OnTimeoutAbort = "abort"
	// OnTimeoutResume, for an escalation only, resumes the run as a human's
	// resume would, with no budget added: the model is told that nobody
	// answered, and goes on with what it has. An approval has no resume:
	// nothing is sent without a human's yes.
	OnTimeoutResume = "resume"
	// OnTimeoutFinish, for an escalation only, ends the run gracefully: a
	// last turn writes a partial answer and a handoff note, kept or
	// compensated as on_budget_exhausted says.
	OnTimeoutFinish = "finish"

	// ApprovalTimeoutEscalate, an approval's on_timeout before spec
	// version 4 (and its default there), escalates the run; the request
	// stays open, so a human may still approve or deny it, and the model's
	// next identical call picks up the decision (or waits once more).
	ApprovalTimeoutEscalate = "escalate"
	// ApprovalTimeoutFail, an approval's on_timeout before spec version 4,
	// ends the run: it fails and walks its compensations, naming the call
	// nobody approved.
	ApprovalTimeoutFail = "fail"
)

// defaultApprovalTimeout is how long a call waits for a human when the
// spec does not say: a working day and a night.
const defaultApprovalTimeout = 24 * time.Hour

// MaxReminders bounds the reminders of one wait for a person
// (remind_every against timeout): each is a timer and an event in the
// run's history, which does not continue as new while a person is awaited.
const MaxReminders = 48

// ApprovalSpec says when a call of a tool waits for a human's yes before it
// is sent, and how long. In a spec it is an object, or just its rule:
// "approval": "always". A tool marked irreversible needs approval always
// unless its spec says "never".
type ApprovalSpec struct {
	// When is "always", "never", or a CEL condition on the call's
	// arguments (amount > 100): the call waits when it holds, and when it
	// cannot be evaluated (a missing argument).
	When string `json:"when"`
	// TimeoutAfter (timeout in a spec: a Go duration, 30m) bounds the
	// wait; 24h when empty. TimeoutSeconds is its older
	// form, still read; a spec sets one of the two. The run's wall-clock
	// budget does not run while it waits.
	TimeoutAfter   string  `json:"timeout,omitempty"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// OnTimeout is what follows the timeout: OnTimeoutDeny (the default
	// from spec version 4) or OnTimeoutAbort; ApprovalTimeoutEscalate (the
	// default before) and ApprovalTimeoutFail keep their meaning.
	OnTimeout string `json:"on_timeout,omitempty"`
	// RemindEvery (remind_every: a Go duration, 10m) publishes a reminder
	// each period while the call waits, at most MaxReminders in a wait;
	// none when empty.
	RemindEvery string `json:"remind_every,omitempty"`
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
	if d, err := time.ParseDuration(a.TimeoutAfter); err == nil && d > 0 {
		return d
	}
	if a.TimeoutSeconds <= 0 {
		return defaultApprovalTimeout
	}
	return time.Duration(a.TimeoutSeconds * float64(time.Second))
}

// Reminders is the period of the wait's reminders; 0 for none.
func (a ApprovalSpec) Reminders() time.Duration {
	d, _ := time.ParseDuration(a.RemindEvery)
	return max(d, 0)
}

// Validate checks what it can without the tool's schema; the condition
// itself is compiled with the tool's (workflows.RunSpec.Validate).
func (a ApprovalSpec) Validate() error {
	switch {
	case strings.TrimSpace(a.When) == "":
		return fmt.Errorf("approval.when: empty (%q, %q or a condition such as amount > 100)", ApprovalAlways, ApprovalNever)
	case a.TimeoutSeconds < 0:
		return fmt.Errorf("approval.timeout_seconds: %v is negative", a.TimeoutSeconds)
	case a.TimeoutAfter != "" && a.TimeoutSeconds != 0:
		return fmt.Errorf("approval.timeout: %q and approval.timeout_seconds: %v both set; keep timeout", a.TimeoutAfter, a.TimeoutSeconds)
	}
	switch a.OnTimeout {
	case "", OnTimeoutDeny, OnTimeoutAbort, ApprovalTimeoutEscalate, ApprovalTimeoutFail:
	case OnTimeoutResume, OnTimeoutFinish:
		return fmt.Errorf("approval.on_timeout: %q applies to an escalation (escalate.on_timeout); an approval that times out is %q (the call is refused and the run goes on) or %q (the run is aborted): nothing is sent without a human's yes",
			a.OnTimeout, OnTimeoutDeny, OnTimeoutAbort)
	default:
		return fmt.Errorf("approval.on_timeout: %q is not %q (the default) or %q", a.OnTimeout, OnTimeoutDeny, OnTimeoutAbort)
	}
	return ValidateDeadline("approval", a.TimeoutAfter, a.RemindEvery, a.Timeout())
}

// ValidateDeadline checks the timeout and remind_every of a wait for a
// person under field (approval, escalate): Go durations, positive, and
// at most MaxReminders reminders in the wait (timeout is the wait's
// timeout once resolved).
func ValidateDeadline(field, timeoutText, remindEvery string, timeout time.Duration) error {
	if timeoutText != "" {
		d, err := time.ParseDuration(timeoutText)
		switch {
		case err != nil:
			return fmt.Errorf("%s.timeout: %q is not a duration (30m, 4h, 90s)", field, timeoutText)
		case d <= 0:
			return fmt.Errorf("%s.timeout: %q must be positive: every wait for a person has a deadline", field, timeoutText)
		}
	}
	if remindEvery == "" {
		return nil
	}
	d, err := time.ParseDuration(remindEvery)
	switch {
	case err != nil:
		return fmt.Errorf("%s.remind_every: %q is not a duration (10m, 1h)", field, remindEvery)
	case d <= 0:
		return fmt.Errorf("%s.remind_every: %q must be positive (leave it out for no reminders)", field, remindEvery)
	case timeout > 0 && timeout/d > MaxReminders:
		return fmt.Errorf("%s.remind_every: %s against a timeout of %s is %d reminders; at most %d in a wait (remind less often)",
			field, remindEvery, timeout, timeout/d, MaxReminders)
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
	// ApprovalTimedOut: nobody decided in time, and the spec's on_timeout
	// denied the call or ended the run (an escalating timeout leaves the
	// request awaiting); the reason says which.
	ApprovalTimedOut = "timed-out"
	// ApprovalSuperseded: the run was forked while the call waited (issue
	// 45). The fork asks again for the call, under its own key; DecidedBy
	// is the fork's workflow ID. The call was never sent, and no decision
	// can be recorded on the request any more.
	ApprovalSuperseded = "superseded"
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
	// Deadline is when the wait times out, and OnTimeout what follows
	// (ApprovalSpec.OnTimeout, resolved): set by runs whose waits have
	// deadlines (agentsaga-commands 10), published with the request;
	// the ledger does not keep them.
	Deadline  time.Time `json:"deadline,omitzero"`
	OnTimeout string    `json:"on_timeout,omitempty"`
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
