package ledgerdb

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// QueueFigure is one account's admission queue as the metrics report it
// (issue 43): the runs waiting now and how long the oldest has waited,
// and the waits of the runs admitted in the last hour (from enqueued to
// admitted; 0 for a run admitted at once).
type QueueFigure struct {
	Account string
	// Queued is how many of the account's runs wait now.
	Queued int
	// OldestWaitSeconds is how long the account's oldest queued run has
	// waited (0: none waits).
	OldestWaitSeconds float64
	// AdmittedLastHour is how many of its runs were admitted in the last
	// hour; WaitP50Seconds, WaitP95Seconds and WaitMaxSeconds are
	// quantiles of their waits (0 when none was).
	AdmittedLastHour                               int
	WaitP50Seconds, WaitP95Seconds, WaitMaxSeconds float64
}

// QueueFigures reads the figures of every account with a run queued now
// or admitted in the last hour, by account, in one query.
func (s *Store) QueueFigures(ctx context.Context) ([]QueueFigure, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT a.account,
		       count(*) FILTER (WHERE a.status = 'queued')::int,
		       coalesce(extract(epoch FROM clock_timestamp() - min(a.enqueued_at) FILTER (WHERE a.status = 'queued')), 0)::float8,
		       count(*) FILTER (WHERE a.admitted_at > clock_timestamp() - interval '1 hour')::int,
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM a.admitted_at - a.enqueued_at))
		                FILTER (WHERE a.admitted_at > clock_timestamp() - interval '1 hour'), 0)::float8,
		       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM a.admitted_at - a.enqueued_at))
		                FILTER (WHERE a.admitted_at > clock_timestamp() - interval '1 hour'), 0)::float8,
		       coalesce(max(extract(epoch FROM a.admitted_at - a.enqueued_at))
		                FILTER (WHERE a.admitted_at > clock_timestamp() - interval '1 hour'), 0)::float8
		FROM run_admissions a
		WHERE a.status = 'queued' OR a.admitted_at > clock_timestamp() - interval '1 hour'
		GROUP BY a.account
		ORDER BY a.account`)
	if err != nil {
		return nil, fmt.Errorf("ledger: queue figures: %w", err)
	}
	figures, err := pgx.CollectRows(rows, pgx.RowToStructByPos[QueueFigure])
	if err != nil {
		return nil, fmt.Errorf("ledger: queue figures: %w", err)
	}
	return figures, nil
}
