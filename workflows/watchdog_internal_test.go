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
		w := newWatchdog(defaultNoProgressTurns)
		fired := ""
		for item := 1; item <= 4 && fired == ""; item++ {
			fired = w.endTurn(refused(item), nil, outageAware)
		}
		if outageAware {
			assert.Empty(t, fired, "refusals by an open breaker are waits")
			assert.Zero(t, w.stale)
		} else {
			assert.Contains(t, fired, "no progress", "the old path: the same refusal three times looked like a loop")
		}
	}

	w := newWatchdog(defaultNoProgressTurns)
	same := TraceEntry{Tool: "fetch", Arguments: `{"item":1}`, Output: "ok"}
	assert.Empty(t, w.endTurn([]TraceEntry{same}, nil, true), "new: learned")
	waited := same
	waited.Parks = 2
	for range 3 {
		assert.Empty(t, w.endTurn([]TraceEntry{waited}, nil, true), "a parked call's old answer is not a loop")
	}
	assert.Zero(t, w.stale)
	for range 2 {
		assert.Empty(t, w.endTurn([]TraceEntry{same}, nil, true))
	}
	assert.Contains(t, w.endTurn([]TraceEntry{same}, nil, true), "3 turns in a row returned nothing new", "without a wait, nothing new still counts")
}

// A run judged by what it did (issue 30, agentsaga-commands 5): twenty
// writes acknowledged with the same {"ok": true} are progress, each with
// new arguments; new queries to a read-only tool that all answer "no
// results" are not, and the watchdog names the rule it applied. Before
// the change, the write run was stopped after four turns.
func TestWatchdogCountsNewEffectsAsProgress(t *testing.T) {
	t.Parallel()
	for _, judgesEffects := range []bool{false, true} {
		w := newWatchdog(defaultNoProgressTurns)
		w.namesRules = judgesEffects
		fired, turns := "", 0
		for item := 1; item <= 20 && fired == ""; item++ {
			args := fmt.Sprintf(`{"item":%d}`, item)
			repeated := w.voluntaryRetry("inventory", args)
			fired = w.endTurn([]TraceEntry{{Tool: "inventory", Arguments: args, Output: `{"ok": true}`}}, []bool{!repeated}, true)
			turns++
		}
		if judgesEffects {
			assert.Empty(t, fired, "each write with new arguments is progress")
			assert.Equal(t, 20, turns)
		} else {
			assert.Contains(t, fired, "3 turns in a row returned nothing new", "the old path judged the answers alone")
			assert.Equal(t, 4, turns)
		}
	}

	// A read-only search: new queries, the same "no results". Its calls are
	// never effects (changedTheWorld is false for a read_only tool).
	w := newWatchdog(defaultNoProgressTurns)
	w.namesRules = true
	fired, turns := "", 0
	for q := 1; q <= 10 && fired == ""; q++ {
		args := fmt.Sprintf(`{"query":"q%d"}`, q)
		w.voluntaryRetry("search", args)
		call := &toolCall{route: routeTool, newArguments: true, readOnly: true,
			entry: TraceEntry{Tool: "search", Arguments: args, Output: "no results"}}
		fired = w.endTurn([]TraceEntry{call.entry}, []bool{call.changedTheWorld()}, true)
		turns++
	}
	assert.Equal(t, 4, turns, "the first answer is new; three more turns of nothing new fire the watchdog")
	assert.Contains(t, fired, "no progress: 3 turns in a row returned nothing new and changed nothing (rule nothing new)")
	assert.Contains(t, w.note(), "(rule nothing new: progress is", "the note names the rule")

	// A repeated identical write is not a new effect, and is named as a repeat.
	w = newWatchdog(defaultNoProgressTurns)
	w.namesRules = true
	assert.False(t, w.voluntaryRetry("inventory", `{"item":1}`))
	assert.True(t, w.voluntaryRetry("inventory", `{"item":1}`))
	assert.Contains(t, w.note(), "you called inventory with the same arguments again (2 times): this is charged as a retry (rule repeat)")
	failed := &toolCall{route: routeTool, newArguments: true, entry: TraceEntry{Error: "HTTP 503"}}
	assert.False(t, failed.changedTheWorld(), "a failed call changed nothing the run knows of")
}
