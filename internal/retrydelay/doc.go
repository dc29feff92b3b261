// Package retrydelay owns how long a retry waits: a delay drawn with full
// jitter below a budget.Backoff's ceiling ([FullJitter]), and whether it,
// or a server's Retry-After, still fits before the run's deadline ([Fit]).
// The retry hook (activities) decides with it; a run's spec shapes it
// through its retry policy (budget.RetryPolicy.Backoff).
package retrydelay
