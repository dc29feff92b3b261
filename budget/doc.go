// Package budget owns the arithmetic of spending. It is pure and imports
// no third-party module, so the workflow can use it deterministically; its
// Postgres state lives in the ledger.
//
//   - A run's [Limits] and its [RunBudget]: steps, leaf calls, tokens, USD
//     and wall clock, what is [Remaining], and the note the model reads
//     each turn ([RunBudget.Note]).
//   - Retries: a [RetryPolicy] (attempts per call, a cap per tool, the run's
//     ratio and floor), [Backoff] with full jitter, and [RetryDelay], which
//     fits a delay before the run's deadline.
//   - The fleet's shared limits as configuration: the token bucket
//     ([BucketConfig], [DefaultBucket]), circuit breakers ([BreakerConfig],
//     [DefaultBreaker]) and the adaptive release rate of a dependency that
//     declares none ([AdaptiveRelease]).
//   - [Prices] and [ModelPrice], with a default table for the built-in
//     providers' models ([DefaultPricesSource] says where it came from).
//   - Classifying a failure ([Class]): [ClassifyStatus] says which HTTP
//     statuses are worth a retry, and [RefusalRules] find a 200 that
//     means "no".
package budget
