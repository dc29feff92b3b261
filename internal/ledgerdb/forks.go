package ledgerdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// ErrForkRefused is what ForkRun returns, wrapped with the reason, for a
// source that cannot be forked as asked: nothing changed.
var ErrForkRefused = errors.New("fork refused")

// ForkAtFailed, as ForkRequest.At, forks at the step the source failed or
// escalated at: its last step.
const ForkAtFailed = 0

// ForkRequest is a fork of the run Source, under the new workflow ID Fork,
// from step At.
type ForkRequest struct {
	Source, Fork string
	// At is the first step the fork makes live (ForkAtFailed: the step the
	// source failed or escalated at).
	At int
	// Spec is the fork's resolved spec, recorded as its run row's (its
	// budget.account is the account the fork is charged to).
	Spec json.RawMessage
	// StartedBy names who forked it (the HTTP API's key), "" otherwise.
	StartedBy string
}

// Fork is what ForkRun did.
type Fork struct {
	Source, Fork string
	// At is the step the fork starts at; Seq is its conversation's next
	// place: it holds the source's messages before it.
	At, Seq int
	// Moved are the keys of the actions (effects) that moved from the
	// source, and from its sub-agents, to the fork, oldest first.
	Moved []string
}

// stepBelow is the step an action of the run $1 (or of one of its
// sub-agents, whose workflow IDs extend its own) was made at: the one it
// inherited it at, or the one its key names below $1.
const stepBelow = `coalesce(a.fork_step, (regexp_match(substr(a.idempotency_key, length($1) + 2), '^step-(\d+)-'))[1]::int)`

// ForkRun forks req.Source from step req.At into a new run req.Fork, in one
// transaction that holds the source's row: it records the fork's run row
// (linked to its source), copies the source's conversation before the
// step's model turn, moves every effect (tool action, its compensation
// and its per-run limit hold) the source and its sub-agents made before
// the step to the fork, and marks the source forked, which also fences
// its forward claims (closing_at): it can no longer act, and its rollback,
// should it be aborted, walks only what it kept. Model turns stay the
// source's: they are its spending, not effects. The approval requests of
// the source's tree still awaiting a decision are closed as superseded by
// the fork (supersedeApprovals): the fork asks again for a call it makes.
// The source's admission ends (agentsaga_admission_end, outcome forked):
// its place and what it still held of its reservation go back to its
// account, for the fork or any run that waits.
//
// It refuses (ErrForkRefused, saying why) a sub-agent, a source already
// forked into another run, one compensated or being compensated, one still
// running (stop it at a step boundary first), a step the source did not
// reach, and an effect still held by a live attempt. Asked again for the
// same fork, it returns what it did, so a caller whose start of the fork's
// workflow failed may try again.
func (s *Store) ForkRun(ctx context.Context, req ForkRequest) (Fork, error) {
	out := Fork{Source: req.Source, Fork: req.Fork}
	if req.Source == "" || req.Fork == "" || req.Source == req.Fork {
		return out, fmt.Errorf("ledger: fork %s into %q: %w: the source and a new, different ID are required", req.Source, req.Fork, ErrForkRefused)
	}
	if req.At < 0 {
		return out, fmt.Errorf("ledger: fork %s at step %d: %w: steps start at 1", req.Source, req.At, ErrForkRefused)
	}
	spec := req.Spec
	if len(spec) == 0 {
		spec = json.RawMessage("{}")
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var src struct {
			parent, forkedInto *string
			status, goal       string
			closing, finished  bool
			forkedAt           *int
		}
		err := tx.QueryRow(ctx, `
			SELECT parent_workflow_id, forked_into, status, goal, closing_at IS NOT NULL, finished_at IS NOT NULL, forked_at_step
			FROM runs WHERE workflow_id = $1 FOR UPDATE`, req.Source).
			Scan(&src.parent, &src.forkedInto, &src.status, &src.goal, &src.closing, &src.finished, &src.forkedAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if src.forkedInto != nil {
			if *src.forkedInto != req.Fork {
				return fmt.Errorf("%w: it was already forked into %s; fork that run to go again", ErrForkRefused, *src.forkedInto)
			}
			return forkDone(ctx, tx, &out)
		}
		var awaiting bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM approvals WHERE workflow_id = $1 AND status = 'awaiting-approval')`,
			req.Source).Scan(&awaiting); err != nil {
			return err
		}
		if why := unforkable(src.parent, src.status, src.closing, src.finished, awaiting); why != "" {
			return fmt.Errorf("%w: %s", ErrForkRefused, why)
		}
		last, err := lastStep(ctx, tx, req.Source)
		if err != nil {
			return err
		}
		first := 1
		if src.forkedAt != nil {
			// A fork holds its source's turns before its own first step
			// only as messages: those steps are its source's to fork.
			first = *src.forkedAt
		}
		out.At = req.At
		if out.At == ForkAtFailed {
			if src.status != agentsagatype.RunEscalated && src.status != agentsagatype.RunFailed && src.status != agentsagatype.RunNeedsAttention {
				return fmt.Errorf("%w: at failed: it did not fail or escalate (status %s); name a step", ErrForkRefused, src.status)
			}
			out.At = last
		}
		if last == 0 || out.At < first || out.At > last {
			return fmt.Errorf("%w: step %d is not a step it made (it made steps %d to %d)", ErrForkRefused, out.At, first, last)
		}
		if out.Seq, err = turnThrough(ctx, tx, req.Source, out.At); err != nil {
			return err
		}
		var held string
		err = tx.QueryRow(ctx, `WITH `+runTree+`
			SELECT a.idempotency_key FROM actions a
			WHERE a.workflow_id IN (SELECT workflow_id FROM tree) AND a.kind = 'tool' AND `+stepBelow+` < $2
			  AND a.status = 'started' AND a.locked_until >= clock_timestamp() LIMIT 1`, req.Source, out.At).Scan(&held)
		switch {
		case err == nil:
			return fmt.Errorf("%w: an attempt still holds %s; fork once it settled", ErrForkRefused, held)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO runs (workflow_id, run_id, goal, spec, started_by, forked_from, forked_at_step)
			VALUES ($1, '', $2, $3, $4, $5, $6) ON CONFLICT (workflow_id) DO NOTHING`,
			req.Fork, src.goal, spec, req.StartedBy, req.Source, out.At)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: the ledger already has a run %s; pick a new ID", ErrForkRefused, req.Fork)
		}
		if err := moveEffects(ctx, tx, &out); err != nil {
			return err
		}
		// The source acts no more: its place and reservation in its
		// account's admission go back, and the fork, when charged to an
		// account, asks for its own (workflows: run.admit).
		if _, err := tx.Exec(ctx, `SELECT agentsaga_admission_end($1, 'forked')`, req.Source); err != nil {
			return err
		}
		return supersedeApprovals(ctx, tx, out)
	})
	if err != nil {
		return Fork{}, fmt.Errorf("ledger: fork %s into %s: %w", req.Source, req.Fork, err)
	}
	return out, nil
}

// unforkable says why a source with this row cannot be forked, or "";
// awaiting says that a call of it waits for an approval.
func unforkable(parent *string, status string, closing, finished, awaiting bool) string {
	switch {
	case parent != nil:
		return fmt.Sprintf("it is a sub-agent of %s, and forking inside a sub-agent is not supported: fork %s at the step that called it", *parent, *parent)
	case status == agentsagatype.RunCompensated:
		return "it was compensated: its effects are undone, and a fork would inherit nothing it could stand on"
	case closing && status != agentsagatype.RunFailed:
		// A failed run walked its stack and found nothing to undo: what
		// it did stands, and may be inherited.
		return fmt.Sprintf("its compensation has begun (status %s): its effects are being undone", status)
	case status == agentsagatype.RunTerminated:
		return "it was terminated, and its rollback walks its effects back"
	case !finished && status != agentsagatype.RunEscalated && status != agentsagatype.RunNeedsAttention && !awaiting:
		// Escalated, a run is at a step boundary and acts no more until a
		// human answers; waiting for an approval, it makes no new call
		// before STEP, and the calls of its step stay its own.
		return fmt.Sprintf("it is %s: stop it at a step boundary first (agentsaga.Run.Fork does); the ledger forks a run once it ended, escalated or waits for an approval", status)
	}
	return ""
}

// lastStep is the last step the run made a model turn at (0: none).
func lastStep(ctx context.Context, tx pgx.Tx, workflowID string) (int, error) {
	var last int
	err := tx.QueryRow(ctx, `
		SELECT coalesce(max((regexp_match(substr(idempotency_key, length($1) + 2), '^step-(\d+)-(?:model|finish)$'))[1]::int), 0)
		FROM actions WHERE workflow_id = $1 AND kind = 'model'`, workflowID).Scan(&last)
	return last, err
}

// turnThrough is where step's model turn of the run read its conversation
// up to: the messages before it are the conversation the step saw.
func turnThrough(ctx context.Context, tx pgx.Tx, workflowID string, step int) (int, error) {
	var through *int
	err := tx.QueryRow(ctx, `
		SELECT (arguments::jsonb ->> 'through')::int FROM actions
		WHERE idempotency_key IN ($1, $2) ORDER BY id LIMIT 1`,
		activityid.Key(workflowID, activityid.Model(step)), activityid.Key(workflowID, activityid.Finish(step))).Scan(&through)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && through == nil) {
		return 0, fmt.Errorf("%w: the ledger has no model turn of step %d to read its conversation from", ErrForkRefused, step)
	}
	return *through, err
}

// moveEffects moves what f.Source's tree did before step f.At to f.Fork,
// copies its conversation before f.Seq and marks the source forked.
func moveEffects(ctx context.Context, tx pgx.Tx, f *Fork) error {
	rows, err := tx.Query(ctx, `
		WITH `+runTree+`, moving AS (
			SELECT a.id, `+stepBelow+` AS step FROM actions a
			WHERE a.workflow_id IN (SELECT workflow_id FROM tree) AND a.kind = 'tool'
		), moved AS (
			UPDATE actions a SET workflow_id = $2, fork_step = m.step, updated_at = clock_timestamp()
			FROM moving m WHERE a.id = m.id AND m.step < $3
			RETURNING a.id, a.idempotency_key
		)
		SELECT idempotency_key FROM moved ORDER BY id`, f.Source, f.Fork, f.At)
	if err != nil {
		return err
	}
	if f.Moved, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return err
	}
	// The compensation's activity ID becomes the forward key's path below
	// the source, so the fork's walk gives each inherited compensation a
	// key of its own (fork/<path>/compensate), a sub-agent's included. A
	// key a fork inherited already has its path.
	if _, err := tx.Exec(ctx, `
		UPDATE compensations SET workflow_id = $2, updated_at = clock_timestamp(),
		       forward_activity_id = CASE WHEN starts_with(forward_key, $1 || '/')
		                                  THEN substr(forward_key, length($1) + 2) ELSE forward_activity_id END
		WHERE forward_key = ANY($3)`, f.Source, f.Fork, f.Moved); err != nil {
		return err
	}
	// A per-run limit counts what the fork inherited: forking is no way
	// around a running total.
	if _, err := tx.Exec(ctx, `UPDATE limit_holds SET workflow_id = $2 WHERE workflow_id = $1 AND idempotency_key = ANY($3)`,
		f.Source, f.Fork, f.Moved); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO messages (workflow_id, seq, role, content, tool_calls, tool_call_id, name, pinned, source_key, tokens, created_at)
		SELECT $2, seq, role, content, tool_calls, tool_call_id, name, pinned, source_key, tokens, created_at
		FROM messages WHERE workflow_id = $1 AND seq < $3`, f.Source, f.Fork, f.Seq); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE runs SET forked_into = $2, closing_at = coalesce(closing_at, clock_timestamp()) WHERE workflow_id = $1`,
		f.Source, f.Fork)
	return err
}

const supersedeApprovalsSQL = `
	WITH ` + runTree + `, closed AS (
		UPDATE approvals SET status = 'superseded', decided_by = $2, reason = $3, decided_at = clock_timestamp()
		WHERE workflow_id IN (SELECT workflow_id FROM tree) AND status = 'awaiting-approval'
		RETURNING ` + approvalColumns + `
	)
	SELECT * FROM closed ORDER BY requested_at, idempotency_key`

// publishEventSQL appends one event to a run's log (migration 00024) in
// the statement's transaction.
const publishEventSQL = `SELECT agentsaga_publish_events($1, ARRAY[$2::text], ARRAY[$3::text], ARRAY[$4::text], ARRAY[$5::jsonb])`

// supersedeApprovals closes every request of f.Source's tree that still
// awaits a decision, as superseded by f.Fork (migration 00036), and puts
// its decision in its run's event log as a human's would be. The fork
// asks again, under its own key, for a call its model makes, and the
// source's claims are fenced: a decision on the source's request could
// free no call, so no listing of what waits for a human may show it. The
// source's workflow is not told (that would take a command); it waits on,
// and a decision sent to it is refused by the ledger, naming the fork.
func supersedeApprovals(ctx context.Context, tx pgx.Tx, f Fork) error {
	rows, err := tx.Query(ctx, supersedeApprovalsSQL, f.Source, f.Fork,
		fmt.Sprintf("the run was forked into %s at step %d, which asks again for a call its model makes", f.Fork, f.At))
	if err != nil {
		return err
	}
	closed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentsagatype.Approval, error) { return scanApproval(row) })
	if err != nil {
		return err
	}
	for _, a := range closed {
		data, err := json.Marshal(a)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, publishEventSQL, a.WorkflowID, a.Key+"/decided", runevents.ApprovalDecided, a.Key, data); err != nil {
			return err
		}
	}
	return nil
}

// forkDone fills f with the fork already made of f.Source into f.Fork.
func forkDone(ctx context.Context, tx pgx.Tx, f *Fork) error {
	if err := tx.QueryRow(ctx, `SELECT forked_at_step FROM runs WHERE workflow_id = $1`, f.Fork).Scan(&f.At); err != nil {
		return err
	}
	var err error
	if f.Seq, err = turnThrough(ctx, tx, f.Source, f.At); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `
		SELECT idempotency_key FROM actions WHERE workflow_id = $1 AND fork_step IS NOT NULL AND fork_step < $2 ORDER BY id`,
		f.Fork, f.At)
	if err != nil {
		return err
	}
	f.Moved, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return err
}
