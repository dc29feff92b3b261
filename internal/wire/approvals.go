package wire

import (
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// ApprovalDecision is a human's answer to a request, as the approve and
// deny Updates carry it and the ledger records it.
type ApprovalDecision struct {
	Key     string `json:"key,omitempty"`
	Call    string `json:"call"`
	Approve bool   `json:"approve"`
	// By is who decided: the caller's identity (a person, not a process).
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	// TimedOut records that nobody decided in time (the spec's on_timeout
	// denied the call or ended the run); the workflow sets it, never a
	// human.
	TimedOut bool `json:"timed_out,omitempty"`
}

// Status is the approval status the decision records.
func (d ApprovalDecision) Status() string {
	switch {
	case d.TimedOut:
		return agentsagatype.ApprovalTimedOut
	case d.Approve:
		return agentsagatype.ApprovalApproved
	}
	return agentsagatype.ApprovalDenied
}

// LimitHold asks the ledger to count a call against a run's limit: granted
// when the run's total with Amount stays at most AtMost.
type LimitHold struct {
	Key        string  `json:"key"`
	WorkflowID string  `json:"workflow_id"`
	Tool       string  `json:"tool"`
	Limit      string  `json:"limit"`
	Amount     float64 `json:"amount"`
	AtMost     float64 `json:"at_most"`
}

// LimitHeld is the ledger's answer to a LimitHold: whether the call may go,
// and the run's total before it.
type LimitHeld struct {
	Granted bool    `json:"granted"`
	Total   float64 `json:"total"`
}

// What a wait for a person is of (WaitEvent.Of).
const (
	WaitApproval   = "approval"
	WaitEscalation = "escalation"
)

// WaitEvent is a reminder of a wait for a person, or its timeout, as the
// workflow hands it to ActivityPublishWaitEvent: the run's event log
// stores it under Key (once, however often it is published) as an
// approval_reminder, approval_timed_out, escalation_reminder or
// escalation_timed_out event (internal/runevents), with this as its data.
type WaitEvent struct {
	WorkflowID string `json:"workflow_id"`
	Key        string `json:"key"`
	// Of is WaitApproval or WaitEscalation.
	Of string `json:"of"`
	// Call, Tool, CallKey and Arguments name the call waiting for approval
	// (an approval's only).
	Call      string `json:"call,omitempty"`
	Tool      string `json:"tool,omitempty"`
	CallKey   string `json:"call_key,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	// Why is why the run waits: the approval's rule, or the escalation's
	// cause.
	Why string `json:"why"`
	// Since is when the wait began, and Deadline when it times out (Since
	// plus Timeout, a Go duration, unless the run's deadline came first).
	Since     time.Time `json:"since"`
	Deadline  time.Time `json:"deadline"`
	Timeout   string    `json:"timeout"`
	OnTimeout string    `json:"on_timeout"`
	// Reminder is a reminder's number in its wait, from 1; for a timeout,
	// Reminders is how many the wait published.
	Reminder  int `json:"reminder,omitempty"`
	Reminders int `json:"reminders,omitempty"`
	// TimedOut marks the timeout's event; Action is what the run did
	// (denied, aborted, escalated, failed, finished, resumed) and Reason
	// what it says of it.
	TimedOut bool   `json:"timed_out,omitempty"`
	Action   string `json:"action,omitempty"`
	Reason   string `json:"reason,omitempty"`
}
