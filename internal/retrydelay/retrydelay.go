package retrydelay

import (
	"math/rand/v2"
	"time"

	"github.com/agentsaga/agentsaga/budget"
)

// FullJitter returns a delay for b drawn uniformly from [0, ceiling), where
// ceiling = min(Cap, Base*2^retry) and retry is 0 for a call's first
// retry. Jitter spreads out callers that failed together, so they do not
// come back together and knock the dependency over again. random returns
// a float in [0, 1); nil means math/rand/v2's. A zero ceiling gives 0.
func FullJitter(b budget.Backoff, retry int, random func() float64) time.Duration {
	ceiling := ceiling(b, retry)
	if ceiling <= 0 {
		return 0
	}
	if random == nil {
		random = rand.Float64
	}
	d := time.Duration(random() * float64(ceiling))
	// float64 has 53 bits; a ceiling above 2^53 ns (about 104 days) can
	// round a draw just below 1 up to the ceiling itself.
	return min(max(d, 0), ceiling-1)
}

// ceiling is min(b.Cap, b.Base*2^retry) without overflowing: once the doubled
// base would pass Cap, Cap is the answer, however large retry is.
func ceiling(b budget.Backoff, retry int) time.Duration {
	retry = max(retry, 0)
	if b.Base <= 0 || b.Cap <= 0 {
		return 0
	}
	if retry < 63 && b.Base <= b.Cap>>retry {
		return b.Base << retry
	}
	return b.Cap
}

// Fit decides how long to wait before a retry, against the time the
// run has left. A server's Retry-After (retryAfter > 0) wins over jitter,
// since the server knows when it will be ready, but only if it fits in
// timeLeft; a jittered delay likewise. A delay that does not fit returns
// (0, false): napping past the deadline only times the user out politely,
// so the caller should fail now instead. timeLeft < 0 means no deadline.
func Fit(jitter, retryAfter, timeLeft time.Duration) (time.Duration, bool) {
	delay := jitter
	if retryAfter > 0 {
		delay = retryAfter
	}
	if timeLeft >= 0 && delay > timeLeft {
		return 0, false
	}
	return delay, true
}
