// Package budget owns the arithmetic of spending. It is pure and imports
// no third-party module, so the workflow can use it deterministically; its
// Postgres state lives in the ledger.
//
//   - A run's [Limits] and what it has [Usage] of: steps, leaf calls,
//     tokens, USD and wall clock, and what is [Remaining] (a run's Budget
//     query shows both). The run's own running budget, with the note the
//     model reads each turn, is the workflow's (internal/runbudget).
//   - Retries: a [RetryPolicy] (attempts per call, a cap per tool, the run's
//     ratio and floor) and its [Backoff] (full jitter, drawn by
//     internal/retrydelay), and the decisions a retry gets ([Granted],
//     [DenyCallAttempts] and the rest).
//   - The fleet's shared limits as configuration: the token bucket
//     ([BucketConfig], [DefaultBucket]), circuit breakers ([BreakerConfig],
//     [DefaultBreaker]) and the adaptive release rate of a dependency that
//     declares none ([AdaptiveRelease]).
//   - [Prices] and [ModelPrice], with a default table for the built-in
//     providers' models ([DefaultPricesSource] says where it came from).
//   - Whether a failed HTTP call is worth a retry ([RetryableStatus]); a
//     tool's refusal rules, which find a 200 that means "no", are matched
//     by internal/refusal.
package budget
