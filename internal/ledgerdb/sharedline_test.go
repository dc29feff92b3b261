package ledgerdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// Once the breaker has closed, the fresh calls and the released backlog
// share one paced line while the drain is on (migration 00034, issue 46
// item 7): the fresh calls go at once, and a released call goes only in
// the room they left, second by second, not at a pace measured during the
// outage. The seconds run on skip's moved clock, so nothing here depends
// on how fast the machine is.
func TestFreshCallsShareTheLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := budget.DefaultBreaker // released at 10 a second to start with
	store := ledgertest.NewStore(t)
	const dep = "line"

	// An outage parks 30 calls, then the probe closes the breaker.
	for range cfg.Threshold {
		_, err := store.BreakerReport(ctx, dep, false, false, cfg)
		require.NoError(t, err)
	}
	var last ledgerdb.Gate
	for range 30 {
		g, err := store.BreakerGateFirstSend(ctx, dep, cfg)
		require.NoError(t, err)
		require.Equal(t, budget.BreakerOpen, g.State)
		last = g
	}
	skip(t, store, dep, cfg.Cooldown)
	state, err := stateOf(store.BreakerGate(ctx, dep, cfg))
	require.NoError(t, err)
	require.Equal(t, ledgerdb.BreakerProbe, state)
	_, err = store.BreakerReport(ctx, dep, true, true, cfg)
	require.NoError(t, err)

	gate, err := store.BreakerGateFirstSend(ctx, dep, cfg)
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, gate.State)
	assert.WithinDuration(t, last.RetryAt.Add(-cfg.Cooldown).Add(time.Second/10), gate.DrainUntil, 20*time.Millisecond,
		"the drain lasts until the last slot handed out")

	// The clock moves by skips: now is the ledger's time as the rows see
	// it, and advance skips to a time (or does nothing, when the
	// statements themselves took longer).
	var moved time.Duration
	now := func() time.Time { return time.Now().Add(moved) }
	advance := func(to time.Time) {
		if d := to.Sub(now()); d > 0 {
			skip(t, store, dep, d)
			moved += d
		}
	}
	// run plays seconds of fresh first sends, evenly spread, beside a
	// backlog that always has a released call asking for a place, again
	// when the full line says. It returns the released calls booked and
	// the calls sent in each second, fresh and released.
	run := func(seconds, fresh int) (int, []int) {
		t.Helper()
		start := now()
		end := start.Add(time.Duration(seconds) * time.Second)
		var arrivals []time.Time
		for i := range seconds * fresh {
			arrivals = append(arrivals, start.Add(time.Duration(i)*time.Second/time.Duration(fresh)))
		}
		sent := make([]int, seconds)
		count := func() {
			if s := int(now().Sub(start) / time.Second); s < seconds {
				sent[s]++
			}
		}
		released, ask := 0, start
		for len(arrivals) > 0 || ask.Before(end) {
			if len(arrivals) > 0 && !arrivals[0].After(ask) {
				advance(arrivals[0])
				arrivals = arrivals[1:]
				require.NoError(t, store.BreakerShare(ctx, dep, cfg))
				count()
				continue
			}
			advance(ask)
			p, err := store.BreakerPlace(ctx, dep, cfg, 0)
			require.NoError(t, err)
			if !p.Booked {
				require.False(t, p.At.IsZero(), "a full line says when to ask again")
				ask = p.At.Add(moved)
				continue
			}
			released++
			count()
			ask = now()
		}
		advance(end)
		return released, sent
	}
	// 8 fresh calls a second on a rate of 10: each takes a ninth more than
	// a place, so the backlog gets about one a second, and no second holds
	// more than the line's 9 and the boundary's one, whatever the outage
	// measured.
	released, sent := run(5, 8)
	t.Logf("8 fresh calls a second: %d released in 5 s; sent per second %v", released, sent)
	assert.GreaterOrEqual(t, released, 3, "the backlog still drains beside the fresh calls")
	for s, n := range sent {
		assert.LessOrEqual(t, n, 10, "second %d", s)
	}
	// The fresh calls thin out: the backlog takes what they leave.
	released, sent = run(2, 2)
	t.Logf("2 fresh calls a second: %d released in 2 s; sent per second %v", released, sent)
	assert.GreaterOrEqual(t, released, 8)
	for s, n := range sent {
		assert.LessOrEqual(t, n, 10, "second %d", s)
	}
	// A flood books the line a second ahead, no more: the backlog waits
	// beside it, and goes again once the room the fresh calls leave has
	// made that second up.
	released, _ = run(2, 30)
	assert.Zero(t, released, "nothing of the backlog beside a flood")
	released, _ = run(3, 2)
	assert.GreaterOrEqual(t, released, 5, "a flood owes the line a second at most")

	// A released call's place costs what 00018's pace costs: the rate
	// learned from the successes it carries.
	skip(t, store, dep, 2*time.Second)
	before, err := store.ReleaseRate(ctx, dep, cfg)
	require.NoError(t, err)
	p, err := store.BreakerPlace(ctx, dep, cfg, 3)
	require.NoError(t, err)
	require.True(t, p.Booked)
	after, err := store.ReleaseRate(ctx, dep, cfg)
	require.NoError(t, err)
	assert.Equal(t, before, after, "an idle line learns nothing, as 00018's")

	// No breaker row, no line.
	p, err = store.BreakerPlace(ctx, "never-failed", cfg, 0)
	require.NoError(t, err)
	assert.True(t, p.Booked)
	require.NoError(t, store.BreakerShare(ctx, "never-failed", cfg))
}
