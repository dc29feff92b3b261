package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The rule behind a run's search-attribute upserts: a new status at once,
// unchanged figures never, changed figures once searchProgressInterval has
// passed since the last upsert.
func TestProgressDue(t *testing.T) {
	t.Parallel()
	running := searchProgress{status: "running", steps: 3, leafCalls: 6}
	further := searchProgress{status: "running", steps: 4, leafCalls: 8}
	escalated := searchProgress{status: "escalated", steps: 3, leafCalls: 6}
	for name, tc := range map[string]struct {
		current searchProgress
		set     bool
		next    searchProgress
		since   time.Duration
		due     bool
	}{
		"not set yet":                      {next: running, due: true},
		"a new status, at once":            {current: running, set: true, next: escalated, due: true},
		"nothing changed, however long":    {current: running, set: true, next: running, since: time.Hour},
		"progress, before the interval":    {current: running, set: true, next: further, since: searchProgressInterval - time.Millisecond},
		"progress, once the interval ends": {current: running, set: true, next: further, since: searchProgressInterval, due: true},
	} {
		assert.Equal(t, tc.due, progressDue(tc.current, tc.set, tc.next, tc.since), name)
	}
}
