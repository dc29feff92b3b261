package budget

// The in-process token bucket and breaker are used by no production code
// (the fleet's are rows in Postgres); their tests and benchmarks reach them
// through these names.
type (
	TokenBucket = tokenBucket
	Breaker     = breaker
)

var (
	NewTokenBucket = newTokenBucket
	NewBreaker     = newBreaker
)

// DefaultSteadyProbes is what a breaker without SteadyProbes takes.
const DefaultSteadyProbes = defaultSteadyProbes
