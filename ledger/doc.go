// Package ledger is the handle on agentsaga's Postgres ledger that a team
// holds: a [Store] opened with [Open] from a database URL, or made with
// [New] on a pool the caller owns, to give agentsaga.New,
// StartOptions.Ledger and Run.WithLedger. [EnsureDatabase] creates the
// database on a fresh server; the schema is package migrations' to apply.
//
// Beside opening and closing it, a team calls the handle for the accounts'
// spend caps ([Store.SetSpendCap], [Store.RemoveSpendCap],
// [Store.SpendCaps]) and to delete the rows of runs that finished long ago
// ([Store.Prune]), as `agentsaga spend` and `agentsaga prune` do.
//
// The ledger's machinery (run records, the action ledger with its
// idempotency keys, leases and fences, the saga's stack, leaf calls, each
// run's conversation, the fleet's retry bucket, breakers and quotas,
// approvals and limits, spend reservations) is this room's too, under
// internal/ledgerdb, where the engine's rooms reach it through the handle.
package ledger
