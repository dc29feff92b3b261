package ledgerdb

import (
	"context"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// HoldBatches takes every batch slot of s, so that the claims and
// completions sent meanwhile queue up, and returns the function that frees
// the slots: the queued statements then go out together.
func HoldBatches(s *Store) (release func()) { return s.calls.Hold() }

// QueuedStatements is how many statements wait for a batch.
func QueuedStatements(s *Store) int { return s.calls.Queued() }

// Store methods only tests call: production code goes through
// SettleAttempt, ClaimCall/ClaimTurn and the SQL functions instead.

func (s *Store) AppendMessages(ctx context.Context, workflowID string, msgs []Message) error {
	return s.appendMessages(ctx, workflowID, msgs)
}

func (s *Store) BeginLeafCall(ctx context.Context, call LeafCall) (int64, error) {
	return s.beginLeafCall(ctx, call)
}

func (s *Store) DepositToBucket(ctx context.Context, name string, amount float64) (float64, error) {
	return s.depositToBucket(ctx, name, amount)
}

func (s *Store) EndLeafCall(ctx context.Context, id int64, callErr error) error {
	return s.endLeafCall(ctx, id, callErr)
}

func (s *Store) FailAction(ctx context.Context, key string, attempt int, cause, errType string, permanent bool) (agentsagatype.Action, error) {
	return s.failAction(ctx, key, attempt, cause, errType, permanent)
}

func (s *Store) MessageSizes(ctx context.Context, workflowID string, through int) ([]MessageSize, error) {
	return s.messageSizes(ctx, workflowID, through)
}

func (s *Store) OpenBreakers(ctx context.Context) ([]string, error) {
	return s.openBreakers(ctx)
}

func (s *Store) RecordSuccess(ctx context.Context, chargeKey, bucket string, bonus float64, dependency string, probe bool) error {
	return s.recordSuccess(ctx, chargeKey, bucket, bonus, dependency, probe)
}

// SpendPeriod is the period of a cap that holds at, as the reservation
// reads it (agentsaga_spend_period).
func (s *Store) SpendPeriod(ctx context.Context, period, timeZone string, at time.Time) (starts, resets time.Time, err error) {
	err = s.pool.QueryRow(ctx, `SELECT starts, resets FROM agentsaga_spend_period($1, $2, $3)`, period, timeZone, at).Scan(&starts, &resets)
	return starts, resets, err
}

// AgeSpend moves account's spend periods and entries d into the past, as
// if d had passed since they were written: a fake clock for rolling caps,
// whose reservations read the database's own clock.
func (s *Store) AgeSpend(ctx context.Context, account string, d time.Duration) error {
	_, err := s.pool.Exec(ctx, `
		WITH p AS (UPDATE spend_periods SET starts = starts - $2::interval, resets = resets - $2::interval WHERE account = $1)
		UPDATE spend_entries SET settled_at = settled_at - $2::interval WHERE account = $1`, account, d.String())
	return err
}

// SpendSettledAt lists when each of account's calls settled, and what it
// cost.
func (s *Store) SpendSettledAt(ctx context.Context, account string) (at []time.Time, usd []float64, err error) {
	rows, err := s.pool.Query(ctx, `SELECT settled_at, usd::float8 FROM spend_entries WHERE account = $1 ORDER BY settled_at`, account)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var t time.Time
		var v float64
		if err := rows.Scan(&t, &v); err != nil {
			return nil, nil, err
		}
		at, usd = append(at, t), append(usd, v)
	}
	return at, usd, rows.Err()
}
