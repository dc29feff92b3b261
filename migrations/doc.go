// Package migrations owns the ledger's schema: versioned SQL files embedded
// in the binary and applied by pressly/goose.
//
// [Apply] creates nothing implicitly on behalf of the Go API: a team calls
// it (or runs `agentsaga migrate`) on purpose, and `agentsaga worker`
// calls it on start. Applying is idempotent, and workers that start at
// once serialize on a Postgres advisory lock, so every worker may migrate
// on start. [Check] changes nothing: it says whether a database has every
// migration this binary carries, and a worker's readiness probe asks it.
//
// Some of the ledger's logic lives here as SQL functions (the retry
// decision, the breakers, quotas and spend caps), so that each decision is
// one atomic statement across the fleet; a worker in another language can
// call the same functions.
package migrations
