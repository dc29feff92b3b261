package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Statuses of a delivery.
const (
	StatusPending   = "pending"   // not sent yet
	StatusFailed    = "failed"    // an attempt failed; retried at NextAttempt
	StatusDelivered = "delivered" // answered 2xx
	StatusDead      = "dead"      // given up: its retry window passed, or its endpoint answered 410
)

// Delivery is one event on its way to one endpoint.
type Delivery struct {
	// ID is the message's webhook-id, the same on every attempt.
	ID          string    `json:"id"`
	Endpoint    string    `json:"endpoint"`
	Run         string    `json:"run"`
	Seq         int64     `json:"seq"`
	Event       string    `json:"event"`
	Status      string    `json:"status"`
	Attempts    int       `json:"attempts"`
	CreatedAt   time.Time `json:"created_at"`
	NextAttempt time.Time `json:"next_attempt_at,omitzero"`
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
	LastStatus  int       `json:"last_status,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	// Tries are its attempts, oldest first, when asked for.
	Tries []Attempt `json:"tries,omitempty"`
}

// Attempt is one try of a delivery.
type Attempt struct {
	Attempt    int       `json:"attempt"`
	Owner      string    `json:"owner"`
	StartedAt  time.Time `json:"started_at"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	StatusCode int       `json:"status_code,omitempty"`
	DurationMS float64   `json:"duration_ms,omitempty"`
	Error      string    `json:"error,omitempty"`
}

// Filter picks deliveries: those of one endpoint, of one run, or both; of
// endpoints scope sees; the newest Limit (100 when 0).
type Filter struct {
	Scope    string
	Endpoint string
	Run      string
	Limit    int
	// Attempts fills each delivery's Tries.
	Attempts bool
}

// Deliveries lists the deliveries f picks, newest first.
func (s *Store) Deliveries(ctx context.Context, f Filter) ([]Delivery, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := s.pool.Query(ctx, `
		SELECT d.id, d.endpoint_id, d.workflow_id, d.event_seq, d.event, d.status, d.attempts, d.created_at,
			CASE WHEN isfinite(d.next_attempt_at) THEN d.next_attempt_at END, d.delivered_at, d.last_status, d.last_error
		FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
		WHERE ($1 = '' OR e.account = $1 OR starts_with(e.account, $1 || '/'))
		  AND ($2 = '' OR d.endpoint_id = $2) AND ($3 = '' OR d.workflow_id = $3)
		ORDER BY d.created_at DESC, d.event_seq DESC LIMIT $4`, f.Scope, f.Endpoint, f.Run, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("webhooks: deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		var next, delivered *time.Time
		var last *int
		err := row.Scan(&d.ID, &d.Endpoint, &d.Run, &d.Seq, &d.Event, &d.Status, &d.Attempts, &d.CreatedAt,
			&next, &delivered, &last, &d.LastError)
		if next != nil && (d.Status == StatusPending || d.Status == StatusFailed) {
			d.NextAttempt = *next
		}
		if delivered != nil {
			d.DeliveredAt = *delivered
		}
		if last != nil {
			d.LastStatus = *last
		}
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("webhooks: deliveries: %w", err)
	}
	if !f.Attempts || len(out) == 0 {
		return out, nil
	}
	ids := make([]string, len(out))
	at := map[string]int{}
	for i, d := range out {
		ids[i], at[d.ID] = d.ID, i
	}
	rows, err = s.pool.Query(ctx, `
		SELECT delivery_id, attempt, owner, started_at, ended_at, status_code, duration_ms, error
		FROM webhook_attempts WHERE delivery_id = ANY($1) ORDER BY delivery_id, attempt`, ids)
	if err != nil {
		return nil, fmt.Errorf("webhooks: attempts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var a Attempt
		var ended *time.Time
		var code *int
		var ms *float64
		if err := rows.Scan(&id, &a.Attempt, &a.Owner, &a.StartedAt, &ended, &code, &ms, &a.Error); err != nil {
			return nil, fmt.Errorf("webhooks: attempts: %w", err)
		}
		if ended != nil {
			a.EndedAt = *ended
		}
		if code != nil {
			a.StatusCode = *code
		}
		if ms != nil {
			a.DurationMS = *ms
		}
		out[at[id]].Tries = append(out[at[id]].Tries, a)
	}
	return out, rows.Err()
}

// Redeliver sends delivery id again, under the same webhook-id, with a
// retry window of its own; a delivery being sent now is left to its
// attempt. Its endpoint must be enabled.
func (s *Store) Redeliver(ctx context.Context, scope, id string) error {
	var disabled *time.Time
	var leased bool
	err := s.pool.QueryRow(ctx, `
		UPDATE webhook_deliveries d SET status = CASE WHEN d.lease_until > now() THEN d.status ELSE 'pending' END,
			next_attempt_at = CASE WHEN d.lease_until > now() THEN d.next_attempt_at ELSE '-infinity' END,
			retry_from = clock_timestamp()
		FROM webhook_endpoints e
		WHERE d.id = $2 AND e.id = d.endpoint_id AND ($1 = '' OR e.account = $1 OR starts_with(e.account, $1 || '/'))
		RETURNING e.disabled_at, coalesce(d.lease_until > now(), false)`, scope, id).Scan(&disabled, &leased)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: delivery %s", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("webhooks: redeliver %s: %w", id, err)
	}
	if disabled != nil {
		return fmt.Errorf("webhooks: redeliver %s: its endpoint is disabled; it goes out once the endpoint is enabled (agentsaga webhooks enable)", id)
	}
	_, _ = s.pool.Exec(ctx, `SELECT pg_notify('agentsaga_webhooks', '')`)
	return nil
}

// Stats are the outbox's figures, fleet-wide, for the metrics.
type Stats struct {
	Pending, Failed, Delivered, Dead int64
	// OldestUndelivered is the age of the oldest pending or failed
	// delivery (0 when there is none).
	OldestUndelivered time.Duration
}

// Stats counts the deliveries by status.
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	var oldest float64
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'failed'),
			count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE status = 'dead'),
			coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status IN ('pending', 'failed'))), 0)
		FROM webhook_deliveries`).Scan(&st.Pending, &st.Failed, &st.Delivered, &st.Dead, &oldest)
	if err != nil {
		return Stats{}, fmt.Errorf("webhooks: stats: %w", err)
	}
	st.OldestUndelivered = time.Duration(max(oldest, 0) * float64(time.Second))
	return st, nil
}
