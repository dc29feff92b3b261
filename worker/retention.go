package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
)

// PruneEvery is how often a worker runs the ledger's cleaner. Every worker
// does; the cleaner's advisory lock lets one at a time work.
const PruneEvery = time.Hour

// keepPruning runs the ledger's cleaner every interval until ctx ends,
// keeping finished runs for retention (ledger.DefaultRunRetention when
// zero). A pass another worker is doing is skipped quietly.
func keepPruning(ctx context.Context, store *ledger.Store, logger *slog.Logger, interval, retention time.Duration) {
	if retention <= 0 {
		retention = ledger.DefaultRunRetention
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		report, err := store.Prune(ctx, ledger.PruneOptions{RunsFinishedBefore: time.Now().Add(-retention)})
		switch {
		case errors.Is(err, ledger.ErrPruneBusy), ctx.Err() != nil:
		case err != nil:
			logger.Warn("ledger cleaner: a pass failed; the next one retries", "error", err)
		case report != (ledger.PruneReport{}):
			logger.Info("ledger cleaner: pruned", "runs", report.Runs, "retry_charges", report.Charges, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}
