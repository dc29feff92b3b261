package wire

import (
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
	// TimedOut records that nobody decided in time (the run fails); the
	// workflow sets it, never a human.
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
