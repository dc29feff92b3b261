package activities

import (
	"sync"
	"time"
)

// BreakerStaleness bounds how long a worker goes on trusting a closed
// breaker without asking the ledger again: a breaker that another worker
// opens is seen here within this time, and only calls that would have gone
// out anyway had they started a moment earlier get through meanwhile. A
// failure this worker reports, and any answer but closed, are seen at once.
const BreakerStaleness = time.Second

// closedBreakers remembers, per dependency, when the ledger last answered
// that its breaker was closed.
type closedBreakers struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex
	seen map[string]time.Time
}

func newClosedBreakers(ttl time.Duration, now func() time.Time) *closedBreakers {
	return &closedBreakers{ttl: ttl, now: now, seen: map[string]time.Time{}}
}

// fresh says whether the dependency's breaker was seen closed within ttl.
func (c *closedBreakers) fresh(dependency string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[dependency]
	return ok && c.now().Sub(at) < c.ttl
}

func (c *closedBreakers) remember(dependency string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[dependency] = c.now()
}

func (c *closedBreakers) forget(dependency string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, dependency)
}
