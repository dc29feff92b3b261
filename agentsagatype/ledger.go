package agentsagatype

import (
	"encoding/json"
	"time"
)

// Run statuses. Every run ends in one of the non-running ones, and says why
// in Reason.
const (
	// RunQueued: the run waits in its account's admission queue, before
	// its first turn, for room under a spend cap or a concurrency limit.
	RunQueued  = "queued"
	RunRunning = "running"
	// RunAwaitingApproval: a call waits for a human's approval. It is a
	// status the UI and the AgentStatus search attribute show while the
	// run waits; the ledger keeps the request in its approvals.
	RunAwaitingApproval = "awaiting-approval"
	RunCompleted        = "completed"
	RunPartial          = "partial"
	RunEscalated        = "escalated"
	RunCompensated      = "compensated"
	RunNeedsAttention   = "needs-attention"
	RunFailed           = "failed"
)

// Run is a run's record in the ledger.
type Run struct {
	WorkflowID       string          `json:"workflow_id"`
	RunID            string          `json:"run_id"`
	ParentWorkflowID string          `json:"parent_workflow_id,omitempty"`
	Goal             string          `json:"goal"`
	Spec             json.RawMessage `json:"spec"`
	Status           string          `json:"status"`
	Answer           string          `json:"answer,omitempty"`
	HandoffNote      string          `json:"handoff_note,omitempty"`
	Reason           string          `json:"reason,omitempty"`
	StatusDetail     string          `json:"status_detail,omitempty"`
	StepsUsed        int             `json:"steps_used"`
	LeafCalls        int             `json:"leaf_calls"`
	TokensUsed       int64           `json:"tokens_used"`
	USDSpent         float64         `json:"usd_spent"`
	Calls            int             `json:"calls"`
	Retries          int             `json:"retries"`
	StartedAt        time.Time       `json:"started_at"`
	FinishedAt       *time.Time      `json:"finished_at,omitempty"`
	// Account is the account the run is charged to (its spec's
	// budget.account), "" for none.
	Account string `json:"account,omitempty"`
	// StartedBy names who started the run through the HTTP API (the API
	// key's name); "" for a run started any other way.
	StartedBy string `json:"started_by,omitempty"`
	// ForkedFrom is the run this one was forked from, at step ForkedAtStep
	// (issue 45, docs/forks.md); Forks are the runs forked from this one,
	// which took over its effects before their step.
	ForkedFrom   string   `json:"forked_from,omitempty"`
	ForkedAtStep int      `json:"forked_at_step,omitempty"`
	Forks        []string `json:"forks,omitempty"`
}

// RunOutcome is how a run ended.
type RunOutcome struct {
	Status      string  `json:"status"`
	Answer      string  `json:"answer,omitempty"`
	HandoffNote string  `json:"handoff_note,omitempty"`
	Reason      string  `json:"reason,omitempty"`
	StepsUsed   int     `json:"steps_used"`
	TokensUsed  int64   `json:"tokens_used"`
	USDSpent    float64 `json:"usd_spent"`
	Calls       int     `json:"calls"`
	Retries     int     `json:"retries"`
}

// Action statuses.
const (
	// ActionStarted: an attempt holds the key until its lease runs out.
	ActionStarted = "started"
	// ActionCompleted: the first completed result is stored for good.
	ActionCompleted = "completed"
	// ActionFailed: the last attempt failed retryably; the next may claim it.
	ActionFailed = "failed"
	// ActionRejected: the tool answered a definitive "no" (a 4xx); like
	// Stripe, the answer is stored and every later attempt gets it back.
	ActionRejected = "rejected"
)

// Action is one row of the action ledger.
type Action struct {
	ID          int64  `json:"id"`
	Key         string `json:"idempotency_key"`
	WorkflowID  string `json:"workflow_id"`
	ActivityID  string `json:"activity_id"`
	Tool        string `json:"tool"`
	Arguments   string `json:"arguments"`
	Fingerprint string `json:"request_fingerprint"`
	Status      string `json:"status"`
	Result      string `json:"result,omitempty"`
	Error       string `json:"error,omitempty"`
	// ErrorType is the application error type the last attempt failed
	// with (Rejected, Refusal, ...), so a stored failure replays as itself.
	ErrorType string `json:"error_type,omitempty"`
	// Attempts counts the claims of the key: the holder's claim number.
	Attempts       int    `json:"attempts"`
	CompensationID *int64 `json:"compensation_id,omitempty"`
	// Compensates is the forward key, for a compensating action.
	Compensates string `json:"compensates,omitempty"`
	// LockedUntil is the holder's lease, while the action is started.
	LockedUntil *time.Time `json:"locked_until,omitempty"`
	// FencedAt is when the key stopped accepting claims, and FenceReason
	// why (FenceGivenUp or FenceRollback).
	FencedAt    *time.Time `json:"fenced_at,omitempty"`
	FenceReason string     `json:"fence_reason,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
}

// Compensation statuses.
const (
	CompensationRegistered = "registered"  // paired, not yet run
	CompensationDone       = "compensated" // the compensating action completed
	CompensationNotNeeded  = "not-needed"  // the forward action never took effect
	CompensationFailed     = "failed"      // it ran out of attempts; a human is needed
	CompensationSkipped    = "skipped"     // a human took responsibility
)

// Compensation is one entry of a run's saga stack, with the forward action
// it undoes.
type Compensation struct {
	ID                int64     `json:"id"`
	ForwardKey        string    `json:"forward_key"`
	ForwardActivityID string    `json:"forward_activity_id"`
	Tool              string    `json:"tool"`
	ArgumentsTemplate string    `json:"arguments_template"`
	Status            string    `json:"status"`
	Error             string    `json:"error,omitempty"`
	Reason            string    `json:"reason,omitempty"`
	Forward           Action    `json:"forward"`
	UpdatedAt         time.Time `json:"updated_at"`
}

// RunTerminated is the status of a run that ended behind the engine's back
// (terminated in Temporal, timed out, or whose workflow vanished): the
// reconciler found it and its compensation stack is being walked. The walk
// ends it compensated or needs-attention; Reason keeps Temporal's reason.
const RunTerminated = "terminated"
