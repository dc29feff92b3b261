package activities

import (
	"sync"
	"time"
)

// breakerStaleness bounds how long a worker goes on trusting a closed
// breaker without asking the ledger again: a breaker that another worker
// opens is seen here within this time, and only calls that would have gone
// out anyway had they started a moment earlier get through meanwhile. A
// failure this worker reports, and any answer but closed, are seen at once.
const breakerStaleness = time.Second

// closedBreakers remembers, per dependency, when the ledger last answered
// that its breaker was closed, whether the dependency was then in a
// streak of failures (ledgerdb.Gate.Failures), which the next success must
// end by reporting itself, and until when a drain of its parked calls is
// on (ledgerdb.Gate.DrainUntil), during which a first send takes a place
// in the paced line.
type closedBreakers struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	seen map[string]closedAnswer
}

type closedAnswer struct {
	at         time.Time
	streak     bool
	drainUntil time.Time
}

func newClosedBreakers(ttl time.Duration, now func() time.Time) *closedBreakers {
	return &closedBreakers{ttl: ttl, now: now, seen: map[string]closedAnswer{}}
}

// fresh says whether the dependency's breaker was seen closed within ttl,
// and what was seen then.
func (c *closedBreakers) fresh(dependency string) (closedAnswer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	answer, ok := c.seen[dependency]
	if !ok || c.now().Sub(answer.at) >= c.ttl {
		return closedAnswer{}, false
	}
	return answer, true
}

// remember notes a closed breaker the ledger answered for. A report's
// answer says nothing of a drain: drainUntil zero keeps the one the last
// gate named.
func (c *closedBreakers) remember(dependency string, streak bool, drainUntil time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if drainUntil.IsZero() {
		drainUntil = c.seen[dependency].drainUntil
	}
	c.seen[dependency] = closedAnswer{at: c.now(), streak: streak, drainUntil: drainUntil}
}

func (c *closedBreakers) forget(dependency string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, dependency)
}
