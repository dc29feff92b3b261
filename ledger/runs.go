package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run statuses. Every run ends in one of the non-running ones, and says why
// in Reason.
const (
	RunRunning        = "running"
	RunCompleted      = "completed"
	RunPartial        = "partial"
	RunEscalated      = "escalated"
	RunCompensated    = "compensated"
	RunNeedsAttention = "needs-attention"
	RunFailed         = "failed"
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
	StepsUsed        int             `json:"steps_used"`
	LeafCalls        int             `json:"leaf_calls"`
	TokensUsed       int64           `json:"tokens_used"`
	StartedAt        time.Time       `json:"started_at"`
	FinishedAt       *time.Time      `json:"finished_at,omitempty"`
}

// RunOutcome is how a run ended.
type RunOutcome struct {
	Status      string `json:"status"`
	Answer      string `json:"answer,omitempty"`
	HandoffNote string `json:"handoff_note,omitempty"`
	Reason      string `json:"reason,omitempty"`
	StepsUsed   int    `json:"steps_used"`
	TokensUsed  int64  `json:"tokens_used"`
}

// StartRun records that a run began. Recording the same workflow ID again
// is a no-op, because Temporal may deliver the recording activity twice.
func (s *Store) StartRun(ctx context.Context, run Run) error {
	spec := run.Spec
	if len(spec) == 0 {
		spec = json.RawMessage("{}")
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO runs (workflow_id, run_id, parent_workflow_id, goal, spec)
		VALUES ($1, $2, NULLIF($3, ''), $4, $5)
		ON CONFLICT (workflow_id) DO NOTHING`,
		run.WorkflowID, run.RunID, run.ParentWorkflowID, run.Goal, spec)
	if err != nil {
		return fmt.Errorf("ledger: start run %s: %w", run.WorkflowID, err)
	}
	return nil
}

// FinishRun records how a run ended. The leaf-call count is taken from the
// leaf_calls table so that it counts every attempt, not just the ones the
// workflow saw.
func (s *Store) FinishRun(ctx context.Context, workflowID string, out RunOutcome) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE runs SET status = $2, answer = $3, handoff_note = $4, reason = $5,
		       steps_used = $6, tokens_used = $7,
		       leaf_calls = (SELECT count(*) FROM leaf_calls WHERE workflow_id = $1),
		       finished_at = coalesce(finished_at, clock_timestamp())
		WHERE workflow_id = $1`,
		workflowID, out.Status, out.Answer, out.HandoffNote, out.Reason, out.StepsUsed, out.TokensUsed)
	if err != nil {
		return fmt.Errorf("ledger: finish run %s: %w", workflowID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("ledger: finish run %s: %w", workflowID, ErrNotFound)
	}
	return nil
}

// GetRun reads one run.
func (s *Store) GetRun(ctx context.Context, workflowID string) (Run, error) {
	var r Run
	var parent *string
	err := s.pool.QueryRow(ctx, `
		SELECT workflow_id, run_id, parent_workflow_id, goal, spec, status, answer, handoff_note, reason,
		       steps_used, leaf_calls, tokens_used, started_at, finished_at
		FROM runs WHERE workflow_id = $1`, workflowID).Scan(
		&r.WorkflowID, &r.RunID, &parent, &r.Goal, &r.Spec, &r.Status, &r.Answer, &r.HandoffNote, &r.Reason,
		&r.StepsUsed, &r.LeafCalls, &r.TokensUsed, &r.StartedAt, &r.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, fmt.Errorf("ledger: get run %s: %w", workflowID, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("ledger: get run %s: %w", workflowID, err)
	}
	if parent != nil {
		r.ParentWorkflowID = *parent
	}
	return r, nil
}
