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
// that its breaker was closed, and whether the dependency was then in a
// streak of failures (ledgerdb.Gate.Failures), which the next success must
// end by reporting itself.
type closedBreakers struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	seen map[string]closedAnswer
}

type closedAnswer struct {
	at     time.Time
	streak bool
}

func newClosedBreakers(ttl time.Duration, now func() time.Time) *closedBreakers {
	return &closedBreakers{ttl: ttl, now: now, seen: map[string]closedAnswer{}}
}

// fresh says whether the dependency's breaker was seen closed within ttl,
// and whether it was in a streak of failures then.
func (c *closedBreakers) fresh(dependency string) (fresh, streak bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	answer, ok := c.seen[dependency]
	if !ok || c.now().Sub(answer.at) >= c.ttl {
		return false, false
	}
	return true, answer.streak
}

func (c *closedBreakers) remember(dependency string, streak bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[dependency] = closedAnswer{at: c.now(), streak: streak}
}

func (c *closedBreakers) forget(dependency string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, dependency)
}
