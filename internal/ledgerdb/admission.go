package ledgerdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Admission by run (migration 00029, issue 43): under a spend cap, an
// account's max_concurrent_runs or a model's, a run is admitted whole
// before its first turn or waits in its root account's queue. Admitting
// reserves the run's estimate on the caps; its turns draw on that
// reservation first, and what is left goes back when the run ends.

// AdmissionChannel is the Postgres channel the ledger notifies, with a
// root account as the payload, whenever room may have freed for its
// queue: a run ended, a call settled below its reservation, a cap or a
// limit changed, or a pass admitted runs whose workflows must be told.
const AdmissionChannel = "agentsaga_admission"

// MaxPriority is the last priority (the first is 1); DefaultPriority is
// a run's when it sets none.
const (
	MaxPriority     = 5
	DefaultPriority = 3
)

// AdmitRun puts a run in its account's queue and admits what fits, or,
// for a run already there, runs a pass and reads where it stands. One
// statement.
func (s *Store) AdmitRun(ctx context.Context, req wire.AdmitRequest) (wire.Admission, error) {
	if req.RunID == "" || req.Account == "" {
		return wire.Admission{}, fmt.Errorf("ledger: admit run %q: the run ID and the account are required", req.RunID)
	}
	if req.Priority < 1 || req.Priority > MaxPriority {
		return wire.Admission{}, fmt.Errorf("ledger: admit run %s: priority %d is outside 1 to %d", req.RunID, req.Priority, MaxPriority)
	}
	var quotaMax *int
	if req.QuotaMax > 0 {
		quotaMax = &req.QuotaMax
	}
	var a wire.Admission
	var place *int64
	if err := s.pool.QueryRow(ctx, `SELECT status, place, reason, estimate::float8 FROM agentsaga_admission_enqueue($1, $2, $3, $4, $5, $6, $7, $8)`,
		req.RunID, req.Account, req.SpecKey, req.QuotaKey, quotaMax, req.Priority, req.BudgetUSD, req.LeaseMS,
	).Scan(&a.Status, &place, &a.Reason, &a.EstimateUSD); err != nil {
		return wire.Admission{}, fmt.Errorf("ledger: admit run %s: %w", req.RunID, err)
	}
	if place != nil {
		a.Place = int(*place)
	}
	return a, nil
}

// AdmitQueued runs one admission pass over a root account's queue and
// returns how many runs it admitted.
func (s *Store) AdmitQueued(ctx context.Context, root string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT agentsaga_admission_pass($1)`, root).Scan(&n); err != nil {
		return 0, fmt.Errorf("ledger: admit the queue of %s: %w", root, err)
	}
	return n, nil
}

// QueuedRoots are the root accounts with runs waiting, and the earliest
// time one of their caps frees room by itself (a period's reset, or a
// rolling window's oldest spend leaving it; zero when none of them waits
// on a cap).
func (s *Store) QueuedRoots(ctx context.Context) (roots []string, frees time.Time, err error) {
	rows, err := s.pool.Query(ctx, `
		SELECT q.root, (SELECT min(h.frees) FROM spend_caps c,
		                 LATERAL agentsaga_spend_held(c.account, c.period, c.time_zone, clock_timestamp()) h
		                 WHERE c.admit = 'run' AND split_part(c.account, '/', 1) = q.root)
		FROM (SELECT DISTINCT root FROM run_admissions WHERE status = 'queued') q`)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("ledger: queued roots: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var root string
		var at *time.Time
		if err := rows.Scan(&root, &at); err != nil {
			return nil, time.Time{}, fmt.Errorf("ledger: queued roots: %w", err)
		}
		roots = append(roots, root)
		if at != nil && (frees.IsZero() || at.Before(frees)) {
			frees = *at
		}
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("ledger: queued roots: %w", err)
	}
	return roots, frees, nil
}

// UnsignalledAdmissions are runs admitted by a pass that their workflows
// have not been told of yet, at most limit.
func (s *Store) UnsignalledAdmissions(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT run_id FROM run_admissions WHERE status = 'admitted' AND NOT signalled
		ORDER BY admitted_at LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("ledger: unsignalled admissions: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("ledger: unsignalled admissions: %w", err)
	}
	return ids, nil
}

// MarkSignalled records that the runs' workflows were told they are
// admitted.
func (s *Store) MarkSignalled(ctx context.Context, runIDs []string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE run_admissions SET signalled = true WHERE run_id = ANY ($1)`, runIDs); err != nil {
		return fmt.Errorf("ledger: mark %d admissions signalled: %w", len(runIDs), err)
	}
	return nil
}

// CancelQueued takes a queued run out of its queue; its workflow, told by
// the caller, then ends without a turn. A run that is not queued is
// ErrNotQueued.
//
// The run's row is locked from the read to the end: a pass that admitted
// the run in between would otherwise have its admission ended under a
// run that was told it may start.
func (s *Store) CancelQueued(ctx context.Context, runID string) error {
	var status string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT status FROM run_admissions WHERE run_id = $1 FOR UPDATE`, runID).Scan(&status); err != nil {
			return err
		}
		if status != wire.AdmissionQueued {
			return ErrNotQueued
		}
		_, err := tx.Exec(ctx, `SELECT agentsaga_admission_end($1, 'cancelled')`, runID)
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("ledger: cancel queued run %s: %w", runID, ErrNotFound)
	case errors.Is(err, ErrNotQueued):
		return fmt.Errorf("ledger: cancel queued run %s: it is %s: %w", runID, status, ErrNotQueued)
	case err != nil:
		return fmt.Errorf("ledger: cancel queued run %s: %w", runID, err)
	}
	return nil
}

// ErrNotQueued is returned for a run that is not in an admission queue.
var ErrNotQueued = errors.New("the run is not queued")

// AccountLimits are an account's share of the fleet.
type AccountLimits struct {
	Account string `json:"account"`
	// MaxConcurrentRuns bounds the account's admitted runs, its
	// children's included (0: no bound).
	MaxConcurrentRuns int `json:"max_concurrent_runs,omitempty"`
	// Weight is the account's share in the round robin of its root's
	// queue, and its Temporal fairness weight (1 when unset).
	Weight    int       `json:"weight"`
	UpdatedBy string    `json:"updated_by,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SetAccountLimits sets an account's max_concurrent_runs and weight. A
// raised limit starts waiting runs at once (the loops are notified).
func (s *Store) SetAccountLimits(ctx context.Context, l AccountLimits, by string) error {
	if err := budget.ValidateAccount(l.Account); err != nil {
		return fmt.Errorf("ledger: set account limits: %w", err)
	}
	if l.MaxConcurrentRuns < 0 {
		return fmt.Errorf("ledger: set account limits %s: max_concurrent_runs %d is negative", l.Account, l.MaxConcurrentRuns)
	}
	if l.Weight == 0 {
		l.Weight = 1
	}
	if l.Weight < 1 || l.Weight > 1000 {
		return fmt.Errorf("ledger: set account limits %s: weight %d is outside 1 to 1000", l.Account, l.Weight)
	}
	if by == "" {
		return fmt.Errorf("ledger: set account limits %s: who sets them is empty", l.Account)
	}
	var max *int
	if l.MaxConcurrentRuns > 0 {
		max = &l.MaxConcurrentRuns
	}
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO admission_accounts (account, max_concurrent_runs, weight, updated_by) VALUES ($1, $2, $3, $4)
		ON CONFLICT (account) DO UPDATE SET max_concurrent_runs = excluded.max_concurrent_runs, weight = excluded.weight,
			updated_by = excluded.updated_by, updated_at = clock_timestamp()`, l.Account, max, l.Weight, by); err != nil {
		return fmt.Errorf("ledger: set account limits %s: %w", l.Account, err)
	}
	return nil
}

// AccountShare is what a new run of account weighs on Temporal's
// fairness keys: the account's weight (1 when none is set: its nearest
// ancestor's with one, as a child shares its parent's setting) and how
// many of its runs are in flight (recorded, not yet finished, queued
// ones included), counted up to upTo.
func (s *Store) AccountShare(ctx context.Context, account string, upTo int) (weight, inFlight int, err error) {
	err = s.pool.QueryRow(ctx, `SELECT coalesce((SELECT weight FROM admission_accounts
		WHERE account = ANY (agentsaga_spend_accounts($1)) ORDER BY length(account) DESC LIMIT 1), 1),
		(SELECT count(*) FROM (SELECT 1 FROM runs WHERE account = $1 AND finished_at IS NULL LIMIT $2) f)`,
		account, upTo).Scan(&weight, &inFlight)
	if err != nil {
		return 0, 0, fmt.Errorf("ledger: share of account %s: %w", account, err)
	}
	return weight, inFlight, nil
}

// ListAccountLimits lists the accounts with limits set.
func (s *Store) ListAccountLimits(ctx context.Context) ([]AccountLimits, error) {
	rows, err := s.pool.Query(ctx, `SELECT account, coalesce(max_concurrent_runs, 0), weight, updated_by, updated_at
		FROM admission_accounts WHERE updated_by <> '' ORDER BY account`)
	if err != nil {
		return nil, fmt.Errorf("ledger: list account limits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AccountLimits, error) {
		var l AccountLimits
		err := row.Scan(&l.Account, &l.MaxConcurrentRuns, &l.Weight, &l.UpdatedBy, &l.UpdatedAt)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: list account limits: %w", err)
	}
	return out, nil
}

// QueuedRun is a run waiting in an admission queue.
type QueuedRun struct {
	RunID    string `json:"run_id"`
	Account  string `json:"account"`
	Priority int    `json:"priority"`
	// Place is its place in its root account's queue, from 1.
	Place       int       `json:"place"`
	Reason      string    `json:"reason"`
	EstimateUSD float64   `json:"estimate_usd"`
	EnqueuedAt  time.Time `json:"enqueued_at"`
	// Wait is how long it has waited.
	Wait time.Duration `json:"wait_ns"`
	// ExpectedStart estimates when it starts: the runs ahead of it, at
	// the rate its root admitted runs in the last hour; zero when nothing
	// was admitted then.
	ExpectedStart time.Time `json:"expected_start,omitzero"`
}

// ListQueue lists the queued runs, in each root's order, of account (and
// its children) or of every account when it is "".
func (s *Store) ListQueue(ctx context.Context, account string) ([]QueuedRun, error) {
	rows, err := s.pool.Query(ctx, `
		WITH q AS (
			SELECT a.run_id, a.account, a.root, a.priority, a.reason, a.estimate, a.enqueued_at,
			       row_number() OVER (PARTITION BY a.root ORDER BY a.priority, a.seq) AS place
			FROM run_admissions a WHERE a.status = 'queued'
		), rate AS (
			SELECT root, count(*) / 3600.0 AS per_second FROM run_admissions
			WHERE admitted_at > clock_timestamp() - interval '1 hour' GROUP BY root
		)
		SELECT q.run_id, q.account, q.priority, q.place, q.reason, q.estimate::float8, q.enqueued_at,
		       clock_timestamp() - q.enqueued_at,
		       CASE WHEN r.per_second > 0 THEN clock_timestamp() + q.place / r.per_second * interval '1 second' END
		FROM q LEFT JOIN rate r ON r.root = q.root
		WHERE $1 = '' OR q.account = $1 OR starts_with(q.account, $1 || '/')
		ORDER BY q.root, q.place`, account)
	if err != nil {
		return nil, fmt.Errorf("ledger: list the queue of %q: %w", account, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueuedRun, error) {
		var q QueuedRun
		var expected *time.Time
		err := row.Scan(&q.RunID, &q.Account, &q.Priority, &q.Place, &q.Reason, &q.EstimateUSD, &q.EnqueuedAt, &q.Wait, &expected)
		if expected != nil {
			q.ExpectedStart = *expected
		}
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: list the queue of %q: %w", account, err)
	}
	return out, nil
}

// AdmissionHeld is what admitted runs hold, in all, as reservations not
// yet drawn on: the invariant checks that it is 0 once every run ended.
func (s *Store) AdmissionHeld(ctx context.Context) (held float64, admitted int, err error) {
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(held), 0)::float8, count(*) FILTER (WHERE status = 'admitted')
		FROM run_admissions WHERE status IN ('admitted', 'queued')`).Scan(&held, &admitted); err != nil {
		return 0, 0, fmt.Errorf("ledger: admission held: %w", err)
	}
	return held, admitted, nil
}

// RootAccount is the first element of an account path: the queue it
// waits in.
func RootAccount(account string) string {
	root, _, _ := strings.Cut(account, "/")
	return root
}
