package workflows

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/budget"
)

// An outage is a wait, not a loop: turns whose calls an open breaker
// refused, or that waited behind it and came back with an answer seen
// before, never count as "nothing new" (agentsaga-commands 2); before, the
// third such turn fired the watchdog. A turn that learned nothing without
// waiting still counts, and A/B thrash is still caught.
func TestWatchdogTakesAnOutageForAWait(t *testing.T) {
	t.Parallel()
	refused := func(item int) []TraceEntry {
		return []TraceEntry{{Tool: "fetch", Arguments: fmt.Sprintf(`{"item":%d}`, item), Denial: budget.DenyCircuitOpen,
			Error: "retry denied: the dependency's circuit breaker is open: tool fetch: HTTP 503"}}
	}
	for _, outageAware := range []bool{false, true} {
		w := newWatchdog(WatchdogSpec{})
		fired := ""
		for item := 1; item <= 4 && fired == ""; item++ {
			fired = w.endTurn(refused(item), outageAware)
		}
		if outageAware {
			assert.Empty(t, fired, "refusals by an open breaker are waits")
			assert.Zero(t, w.stale)
		} else {
			assert.Contains(t, fired, "no progress", "the old path: the same refusal three times looked like a loop")
		}
	}

	w := newWatchdog(WatchdogSpec{})
	same := TraceEntry{Tool: "fetch", Arguments: `{"item":1}`, Output: "ok"}
	assert.Empty(t, w.endTurn([]TraceEntry{same}, true), "new: learned")
	waited := same
	waited.Parks = 2
	for range 3 {
		assert.Empty(t, w.endTurn([]TraceEntry{waited}, true), "a parked call's old answer is not a loop")
	}
	assert.Zero(t, w.stale)
	for range 2 {
		assert.Empty(t, w.endTurn([]TraceEntry{same}, true))
	}
	assert.Contains(t, w.endTurn([]TraceEntry{same}, true), "3 turns in a row returned nothing new", "without a wait, nothing new still counts")
}
