package agentsaga

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// ErrNotQueued is what Run.CancelQueued returns for a run that does not
// wait in an admission queue: admitted already, ended, taken out before,
// or never queued. Nothing changed. Find it with errors.Is.
var ErrNotQueued = ledgerdb.ErrNotQueued

// ErrRunNotFound is what Run.CancelQueued returns for an ID the ledger
// has no run under. Find it with errors.Is.
var ErrRunNotFound = ledgerdb.ErrNotFound

// CancelQueued takes a run that waits in its account's admission queue
// out of it (`agentsaga queue cancel`): the ledger marks it cancelled, so
// no pass admits it, and the run is signalled, asks the ledger, and ends
// failed without a turn (a fork walks back the effects it inherited, and
// ends compensated). The handle needs its ledger (Run.WithLedger). A
// run that is not queued is ErrNotQueued; an unknown one ErrRunNotFound.
// When the signal cannot be sent (the workflow is gone, or Temporal is
// unreachable) the run is still out of the queue, and the error says so:
// a live run then ends at its next recheck of the ledger, within minutes.
func (r *Run) CancelQueued(ctx context.Context) error {
	if r.ledger == nil {
		return fmt.Errorf("agentsaga: cancel queued run %s: the handle has no ledger (Run.WithLedger)", r.ID)
	}
	db := ledgerdb.Of(r.ledger)
	err := db.CancelQueued(ctx, r.ID)
	if errors.Is(err, ledgerdb.ErrNotFound) {
		// No admission: a run charged to no account is never queued.
		run, gerr := db.GetRun(ctx, r.ID)
		switch {
		case gerr == nil:
			return fmt.Errorf("agentsaga: cancel queued run %s: it is %s and was never in an admission queue: %w", r.ID, run.Status, ErrNotQueued)
		case errors.Is(gerr, ledgerdb.ErrNotFound):
			return fmt.Errorf("agentsaga: cancel queued run %s: no run with this ID in the ledger: %w", r.ID, ErrRunNotFound)
		default:
			return fmt.Errorf("agentsaga: cancel queued run %s: %w", r.ID, gerr)
		}
	}
	if err != nil {
		return fmt.Errorf("agentsaga: %w", err)
	}
	// The run asks the ledger when woken, finds itself cancelled and ends.
	err = r.c.SignalWorkflow(ctx, r.ID, "", wire.SignalAdmitted, nil)
	var gone *serviceerror.NotFound
	if errors.As(err, &gone) {
		return nil // its workflow ended already (or never started): nothing waits to be told
	}
	if err != nil {
		return fmt.Errorf("agentsaga: cancel queued run %s: it is out of the queue, but signalling its workflow failed "+
			"(it ends when it next asks the ledger): %w", r.ID, err)
	}
	return nil
}
