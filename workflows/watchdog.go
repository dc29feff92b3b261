package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/agentsaga/agentsaga/budget"
)

// WatchdogSpec configures the no-progress watchdog.
type WatchdogSpec struct {
	// NoProgressTurns fires the watchdog after this many turns in a row
	// that made no progress (default 3): no result the run had not seen
	// before and, from agentsaga-commands 5, no successful call with new
	// arguments to a tool that is not read_only.
	NoProgressTurns int `json:"no_progress_turns,omitempty"`
	// OnFire is "finish" (the default: graceful finish) or "escalate".
	OnFire string `json:"on_fire,omitempty"`
}

// Watchdog actions.
const (
	WatchdogFinish   = "finish"
	WatchdogEscalate = "escalate"
)

// watchdog looks across turns, where no per-call retry counter can. Its
// rules, each named in what it tells the model:
//   - repeat: a tool called again with the same arguments (a voluntary
//     retry, charged as one);
//   - alternation: an A-B-A-B alternation between approaches;
//   - nothing new: turns that make no progress. A turn makes progress when
//     one of its results is new, or (agentsaga-commands 5) when a call with
//     arguments the run had not used succeeded on a tool that changes the
//     world: many writes are acknowledged with the same {"ok": true}, and
//     a run doing one write after another is not a loop. A read_only
//     tool's call counts only by its result, so new queries that all
//     answer "no results" are still nothing new.
//
// It is plain deterministic state in the workflow, bounded (it is carried
// across continue-as-new): it remembers the last watchdogMemory calls and
// results, and the last four turns. A call older than that counts as new
// arguments again.
type watchdog struct {
	noProgressTurns int
	calls           map[string]int // tool + canonical arguments -> times called
	callOrder       []string       // calls' keys, oldest first, for eviction
	turns           []string       // one signature per turn with tool calls, the last four
	results         map[string]bool
	resultOrder     []string
	stale           int
	// voluntary counts repeated identical calls per tool.
	voluntary map[string]int
	warnings  []string
	// namesRules says, in each warning, which rule gave it, and judges a
	// turn by its effects too (agentsaga-commands 5). Set from the run's
	// versions, never carried: an execution reads its own.
	namesRules bool
}

// defaultNoProgressTurns is watchdog.no_progress_turns when unset.
const defaultNoProgressTurns = 3

// watchdogMemory bounds the calls and results the watchdog remembers.
const watchdogMemory = 256

// newWatchdog is a watchdog with no memory, which fires after turns turns
// without progress (watchdog.no_progress_turns).
func newWatchdog(turns int) *watchdog {
	return &watchdog{noProgressTurns: turns, calls: map[string]int{}, results: map[string]bool{}, voluntary: map[string]int{}}
}

// watchdogState is a watchdog as continue-as-new carries it.
type watchdogState struct {
	Calls     []string       `json:"calls,omitempty"`  // oldest first
	Counts    []int          `json:"counts,omitempty"` // beside Calls
	Turns     []string       `json:"turns,omitempty"`
	Results   []string       `json:"results,omitempty"`
	Stale     int            `json:"stale,omitempty"`
	Voluntary map[string]int `json:"voluntary,omitempty"`
	Warnings  []string       `json:"warnings,omitempty"`
}

func (w *watchdog) state() watchdogState {
	st := watchdogState{Calls: w.callOrder, Turns: w.turns, Results: w.resultOrder, Stale: w.stale,
		Voluntary: w.voluntary, Warnings: w.warnings}
	for _, c := range w.callOrder {
		st.Counts = append(st.Counts, w.calls[c])
	}
	return st
}

// MarshalJSON writes the watchdog as continue-as-new carries it
// (Carried.Watchdog): its memory, not its configuration.
func (w *watchdog) MarshalJSON() ([]byte, error) { return json.Marshal(w.state()) }

// UnmarshalJSON takes up a carried watchdog's memory; resume gives it this
// execution's configuration.
func (w *watchdog) UnmarshalJSON(data []byte) error {
	var st watchdogState
	if err := json.Unmarshal(data, &st); err != nil {
		return err
	}
	*w = *newWatchdog(0)
	w.restore(st)
	return nil
}

func (w *watchdog) restore(st watchdogState) {
	w.callOrder, w.turns, w.resultOrder, w.stale, w.warnings = st.Calls, st.Turns, st.Results, st.Stale, st.Warnings
	for i, c := range st.Calls {
		if i < len(st.Counts) {
			w.calls[c] = st.Counts[i]
		}
	}
	for _, h := range st.Results {
		w.results[h] = true
	}
	for tool, n := range st.Voluntary {
		w.voluntary[tool] = n
	}
}

// remember adds key to a bounded set kept in order, evicting the oldest.
func remember(order []string, forget func(string), key string) []string {
	order = append(order, key)
	if len(order) > watchdogMemory {
		forget(order[0])
		order = order[1:]
	}
	return order
}

// voluntaryRetry records a call before it runs and says whether it repeats
// an earlier one exactly.
func (w *watchdog) voluntaryRetry(tool, arguments string) bool {
	signature := tool + " " + arguments
	if w.calls[signature] == 0 {
		w.callOrder = remember(w.callOrder, func(k string) { delete(w.calls, k) }, signature)
	}
	w.calls[signature]++
	if w.calls[signature] < 2 {
		return false
	}
	w.voluntary[tool]++
	w.warnings = append(w.warnings, fmt.Sprintf("you called %s with the same arguments again (%d times): this is charged as a retry%s", tool, w.calls[signature], w.rule(ruleRepeat)))
	return true
}

// The watchdog's rules, as the model reads them (from agentsaga-commands 5).
const (
	ruleRepeat      = "repeat"
	ruleAlternation = "alternation"
	ruleNothingNew  = "nothing new"
)

// rule ends a warning with the rule that gave it, once the run judges
// turns by their effects (agentsaga-commands 5): the model is told which
// rule it met, so it knows what counts as progress. Older runs read the
// warnings as they did.
func (w *watchdog) rule(name string) string {
	if !w.namesRules {
		return ""
	}
	return " (rule " + name + ")"
}

// totalVoluntary is the run's voluntary retries.
func (w *watchdog) totalVoluntary() int {
	total := 0
	for _, n := range w.voluntary {
		total += n
	}
	return total
}

// endTurn looks at one turn's tool calls and results and returns why the
// watchdog fires, or "". effects, beside entries, marks the calls that
// changed the world with arguments the run had not used before (a
// successful call of a tool that is not read_only): with namesRules
// (agentsaga-commands 5) such a call is progress, whatever it answered.
// With outageAware (agentsaga-commands 2), a call that waited behind its
// dependency's open breaker, or was refused by it, is a wait, not a loop:
// its result counts when it is new, and never makes the turn "nothing
// new". A turn of waits alone leaves the count as it was.
func (w *watchdog) endTurn(entries []TraceEntry, effects []bool, outageAware bool) string {
	if len(entries) == 0 {
		return ""
	}
	calls := make([]string, 0, len(entries))
	learned, judged := false, false
	for i, e := range entries {
		if w.namesRules && i < len(effects) && effects[i] {
			learned = true // a new effect: progress, whatever the answer
		}
		calls = append(calls, e.Tool+" "+e.Arguments)
		waited := outageAware && (e.Parks > 0 || e.Denial == budget.DenyCircuitOpen)
		judged = judged || !waited
		// The digest stands for the whole output, which history never
		// carries; a preview alone would make different outputs look alike.
		sum := sha256.Sum256([]byte(e.Digest + "\x00" + e.Output + "\x00" + e.Error))
		hash := hex.EncodeToString(sum[:16])
		if !w.results[hash] {
			w.results[hash] = true
			w.resultOrder = remember(w.resultOrder, func(k string) { delete(w.results, k) }, hash)
			learned = true
		}
	}
	sort.Strings(calls)
	w.turns = append(w.turns, strings.Join(calls, "|"))
	if len(w.turns) > 4 {
		w.turns = w.turns[len(w.turns)-4:]
	}

	switch {
	case learned:
		w.stale = 0
	case !judged:
		// Only waits for a dependency that is down: an outage, not a loop.
	default:
		w.stale++
		if w.namesRules {
			w.warnings = append(w.warnings, fmt.Sprintf("your last %d turns learned nothing new and changed nothing "+
				"(rule %s: progress is a result not seen before, or a successful call with new arguments to a tool that is not read-only)",
				w.stale, ruleNothingNew))
		} else {
			w.warnings = append(w.warnings, fmt.Sprintf("your last %d turns learned nothing new", w.stale))
		}
	}
	if n := len(w.turns); n >= 4 {
		a, b := w.turns[n-4], w.turns[n-3]
		if a != b && w.turns[n-2] == a && w.turns[n-1] == b {
			why := fmt.Sprintf("no progress: the run is alternating between two approaches (%s / %s)", clip(a, 80), clip(b, 80))
			return why + w.rule(ruleAlternation)
		}
	}
	if w.stale >= w.noProgressTurns {
		if w.namesRules {
			return fmt.Sprintf("no progress: %d turns in a row returned nothing new and changed nothing (rule %s)", w.stale, ruleNothingNew)
		}
		return fmt.Sprintf("no progress: %d turns in a row returned nothing new", w.stale)
	}
	return ""
}

// note is what the model is told about its looping, then forgotten.
func (w *watchdog) note() string {
	if len(w.warnings) == 0 {
		return ""
	}
	note := "WATCHDOG: " + strings.Join(w.warnings, "; ") + ". Change approach or finish."
	w.warnings = nil
	return note
}
