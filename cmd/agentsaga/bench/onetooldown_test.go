package bench_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// One run, one tool down for its first 4 s: the first call's three failed
// attempts tell the breaker the tool is down, the run waits behind it while
// a probe a cooldown tries the tool, and once the tool is back the run
// fetches all twenty items; nobody is asked.
func TestOneToolDownSmoke(t *testing.T) {
	t.Parallel()
	cfg := bench.OneToolDownConfig{Items: 20, Outage: 4 * time.Second}
	r := inProcess(t, bench.OneToolDown, cfg, func(w io.Writer, r bench.OneToolDownResult) {
		bench.PrintOneToolDown(w, "one run, one tool down 4s", r)
	})
	assert.Equal(t, agentsagatype.RunCompleted, r.Status, "the run waits the outage out instead of ending: %s", r.Reason)
	assert.Equal(t, cfg.Items, r.ItemsFetched)
	assert.Zero(t, r.Escalations, "an outage shorter than escalate.after_breaker_open_seconds pages no one")
	assert.GreaterOrEqual(t, r.Seconds, cfg.Outage.Seconds(), "the first item could not be fetched before the tool was back")
	assert.Equal(t, r.FirstFailures+r.Probes, r.OutageRequests)
	assert.Positive(t, r.FirstFailures, "the outage met the first call")
	assert.LessOrEqual(t, r.FirstFailures, 3, "max_attempts: 3")
	assert.LessOrEqual(t, r.OutageRequests, bench.OneToolDownRequestBound(cfg), "3 attempts, then a probe a cooldown")
	assert.Equal(t, r.ItemsFetched, r.Requests-r.OutageRequests, "once the tool was back, each item took one request")
}
