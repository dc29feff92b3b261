// Package ledgerdb is the ledger room's machinery, agentsaga's Postgres
// state: run records, the action ledger with its idempotency keys, leases
// and fences, the saga's stack, one row per leaf call (attempt), each run's
// conversation, the fleet's shared retry bucket, breakers and provider
// quotas, approvals and per-run limits, and accounts' spend caps. Every statement is
// parameterized and every error says which operation failed.
//
// A [Store] is opened with [Open] from a database URL, or made with [New]
// on a pool the caller owns; the schema is package migrations' to apply.
// A team holds the public handle, package ledger's Store, which opens one
// and offers only what a team calls (spend caps, pruning); the engine's
// rooms reach the store behind it with [Of].
//
// An action is claimed under its key before the call is made
// ([Store.ClaimCall], [Store.ClaimTurn]) and settled after it
// ([Store.SettleAttempt], [Store.CompleteAction]). A key that completed
// returns its stored result; a different request under it is
// [ErrConflict]; a key another attempt holds with a live lease is
// [ErrInFlight]; a fenced key is [ErrFenced], and an attempt that lost its
// lease gets [ErrLeaseLost]. [Store.FenceAction] and [Store.CloseRun]
// fence keys when the workflow gives up on a call or rolls the run back.
//
// The fleet's shared state is changed by single statements:
// [Store.DecideRetry] for the retry budgets, [Store.BreakerGate] and
// [Store.BreakerReport] for the breakers, [Store.AdmitQuota] for a
// provider's quota, and [Store.SetSpendCap], [Store.SpendCaps] and
// [Store.SpendReport] for operators' spend caps. [Store.Prune] deletes
// the rows of runs that finished long ago.
package ledgerdb
