package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// pruneEvery is how often a worker runs the ledger's cleaner. Every worker
// does; the cleaner's advisory lock lets one at a time work.
const pruneEvery = time.Hour

// keepPruning runs the ledger's cleaner every interval until ctx ends,
// keeping finished runs for retention (ledgerdb.DefaultRunRetention when
// zero). A pass another worker is doing is skipped quietly.
func keepPruning(ctx context.Context, store *ledgerdb.Store, logger *slog.Logger, interval, retention time.Duration) {
	if retention <= 0 {
		retention = ledgerdb.DefaultRunRetention
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		report, err := store.Prune(ctx, ledgerdb.PruneOptions{RunsFinishedBefore: time.Now().Add(-retention)})
		switch {
		case errors.Is(err, ledgerdb.ErrPruneBusy), ctx.Err() != nil:
		case err != nil:
			logger.Warn("ledger cleaner: a pass failed; the next one retries", "error", err)
		case report != (ledgerdb.PruneReport{}):
			logger.Info("ledger cleaner: pruned", "runs", report.Runs, "retry_charges", report.Charges, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// expireHoldsEvery is how often a worker ends the spend holds whose lease
// has passed (a worker that died mid-call left them): each reservation
// ends them first too, but an account nobody reserves on would show them
// as reserved until then.
const expireHoldsEvery = time.Minute

// keepExpiringHolds ends dead spend holds every interval until ctx ends.
func keepExpiringHolds(ctx context.Context, store *ledgerdb.Store, logger *slog.Logger, interval time.Duration) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		spent, released, err := store.ExpireSpendHolds(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			logger.Warn("spend holds: a pass failed; the next one retries", "error", err)
		case spent+released > 0:
			logger.Info("spend holds: ended holds whose lease passed", "spent_in_full", spent, "released", released)
		}
	}
}
