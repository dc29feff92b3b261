package agentsagatest

import (
	"testing"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/ledger"
)

// Admit asks the admission queue to admit run runID, charged to account
// (its root account's max_concurrent_runs and the spend caps that admit
// runs decide), at priority (1, first, to 5) with a budget of budgetUSD
// (0: none), as the start of a run does; it says whether the run waits
// queued. The run's row must be in the ledger already. It is for tests of
// what reads the queue (agentsaga queue, the HTTP API's /v1/queue), which
// need runs queued without a worker to start them.
func Admit(t testing.TB, store *ledger.Store, runID, account string, priority int, budgetUSD float64) (queued bool) {
	t.Helper()
	adm, err := ledgerdb.Of(store).AdmitRun(t.Context(), wire.AdmitRequest{RunID: runID, Account: account, SpecKey: "agentsagatest",
		Priority: priority, BudgetUSD: budgetUSD})
	if err != nil {
		t.Fatalf("agentsagatest: %v", err)
	}
	return adm.Status == wire.AdmissionQueued
}
