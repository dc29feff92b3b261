package ledgerdb

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// Imported is a recorded run brought back into a ledger from a dataset
// (agentsaga eval): its run row, ended, the model turns that asked for its
// tool calls, the calls' actions with their outcomes and attempts, and the
// approvals they had. It is only ever read, as a replay's source.
type Imported struct {
	Run       agentsagatype.Run
	Turns     []agentsagatype.Action // kind model
	Actions   []agentsagatype.Action // kind tool
	Approvals []agentsagatype.Approval
	// SubAgents are the sub-agents the run's calls started, each imported
	// as a run of its own whose parent is this one.
	SubAgents []Imported
}

// ImportRun writes in one transaction, and reports whether it wrote: a run
// the ledger already has is left as it is, so importing the same entry
// again changes nothing. The run is written ended, so its keys accept no
// claim: nothing can act under an imported run.
func (s *Store) ImportRun(ctx context.Context, in Imported) (bool, error) {
	wrote := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		wrote, err = importRun(ctx, tx, in, "")
		return err
	})
	if err != nil {
		return false, fmt.Errorf("ledger: import run %s: %w", in.Run.WorkflowID, err)
	}
	return wrote, nil
}

// importRun writes in, and its sub-agents under it, in tx.
func importRun(ctx context.Context, tx pgx.Tx, in Imported, parent string) (bool, error) {
	r := in.Run
	finished := time.Now()
	if r.FinishedAt != nil {
		finished = *r.FinishedAt
	}
	tag, err := tx.Exec(ctx, `
			INSERT INTO runs (workflow_id, run_id, parent_workflow_id, goal, spec, status, answer, handoff_note, reason, steps_used,
			                  tokens_used, usd_spent, calls, started_at, finished_at)
			VALUES ($1, $2, NULLIF($3, ''), $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
			ON CONFLICT (workflow_id) DO NOTHING`,
		r.WorkflowID, r.RunID, parent, storable(r.Goal), r.Spec, r.Status, storable(r.Answer), storable(r.HandoffNote), storable(r.Reason),
		r.StepsUsed, r.TokensUsed, r.USDSpent, r.Calls, r.StartedAt, finished)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	for kind, actions := range map[string][]agentsagatype.Action{"model": in.Turns, "tool": in.Actions} {
		for _, a := range actions {
			fingerprint, _ := canonicalArguments(a.Arguments)
			if _, err := tx.Exec(ctx, `
					INSERT INTO actions (idempotency_key, workflow_id, activity_id, tool, request_fingerprint, arguments, status,
					                     result, error, error_type, attempts, kind, completed_at)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
				a.Key, r.WorkflowID, a.ActivityID, a.Tool, fingerprint, storable(a.Arguments), a.Status, storable(a.Result),
				storable(a.Error), a.ErrorType, max(a.Attempts, 1), kind, finished); err != nil {
				return false, fmt.Errorf("action %s: %w", a.Key, err)
			}
		}
	}
	for _, a := range in.Approvals {
		if _, err := tx.Exec(ctx, `
				INSERT INTO approvals (idempotency_key, workflow_id, call_id, tool, arguments, why, status, decided_by, reason, decided_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			a.Key, r.WorkflowID, a.Call, a.Tool, storable(a.Arguments), storable(a.Why), a.Status, storable(a.DecidedBy),
			storable(a.Reason), finished); err != nil {
			return false, fmt.Errorf("approval %s: %w", a.Key, err)
		}
	}
	for _, sub := range in.SubAgents {
		if _, err := importRun(ctx, tx, sub, r.WorkflowID); err != nil {
			return false, fmt.Errorf("sub-agent %s: %w", sub.Run.WorkflowID, err)
		}
	}
	return true, nil
}
