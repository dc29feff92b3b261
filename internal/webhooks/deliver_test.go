package webhooks_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// A receiver that fails three times and then answers 200 sees one
// webhook-id four times, each signature good by the Standard Webhooks
// library; the outbox records one delivery and its four attempts.
func TestAReceiverThatFailsThreeTimesSeesOneIDFourTimes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	rc := newReceiver(t, func(n int, _ *http.Request) int {
		if n <= 3 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	e := endpoint(t, store, rc.URL)
	escalate(t, runevents.New(pool), "wf-1", 1)

	c := newClock()
	d := webhooks.NewDeliverer(pool, webhooks.Options{Clock: c.Now, Dialer: &loopbackOnly{t: t}})
	drain(t, d, c, time.Hour, 12)

	reqs := rc.requests()
	require.Len(t, reqs, 4)
	for _, r := range reqs {
		require.Equal(t, reqs[0].ID, r.ID, "one webhook-id on every attempt")
		require.NoError(t, verify(t, e.Secret, r))
	}
	m := reqs[3].Message
	require.Equal(t, webhooks.RunEscalated, m.Type)
	require.Equal(t, "wf-1", m.Data.Run)
	require.Equal(t, "escalation 1 of wf-1", m.Data.Reason)
	require.Equal(t, "/v1/runs/wf-1", m.Data.Links.API)
	require.Equal(t, "/runs/wf-1", m.Data.Links.Page)

	list, err := store.Deliveries(ctx, webhooks.Filter{Attempts: true})
	require.NoError(t, err)
	require.Len(t, list, 1, "one delivery")
	got := list[0]
	require.Equal(t, reqs[0].ID, got.ID)
	require.Equal(t, webhooks.StatusDelivered, got.Status)
	require.Equal(t, 4, got.Attempts)
	require.Len(t, got.Tries, 4, "every attempt recorded")
	for i, a := range got.Tries {
		want := http.StatusServiceUnavailable
		if i == 3 {
			want = http.StatusOK
		}
		require.Equal(t, want, a.StatusCode, "attempt %d", i+1)
		require.False(t, a.EndedAt.IsZero())
	}
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, webhooks.Stats{Delivered: 1}, st)
}

// A receiver down for two hours (on a moved clock) gets every event once
// it is back, each once, and each run's in the order of its log.
func TestAReceiverDownForTwoHoursGetsEverythingInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	c := newClock()
	rc, down := downFor(t, c, 2*time.Hour)
	e := endpoint(t, store, rc.URL)
	log := runevents.New(pool)
	runs := []string{"wf-a", "wf-b", "wf-c"}
	for i := range 5 {
		for _, run := range runs {
			escalate(t, log, run, i)
		}
	}
	d := webhooks.NewDeliverer(pool, webhooks.Options{Clock: c.Now, Dialer: &loopbackOnly{t: t}})
	for down() {
		_, err := d.Pass(ctx)
		require.NoError(t, err)
		c.Advance(time.Minute)
	}
	require.Empty(t, rc.delivered())
	require.NotEmpty(t, rc.requests(), "it kept trying while the receiver was down")
	drain(t, d, c, time.Hour, 40)

	got := rc.delivered()
	require.Len(t, got, 15, "every event, once")
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, r := range got {
		require.False(t, seen[r.ID], "delivered twice: %s", r.ID)
		seen[r.ID] = true
		require.NoError(t, verify(t, e.Secret, r))
		run := r.Message.Data.Run
		require.Greater(t, r.Message.Data.Event.Seq, last[run], "%s out of order", run)
		last[run] = r.Message.Data.Event.Seq
	}
	for _, r := range rc.requests() {
		if !r.OK {
			// Only a run's first undelivered event was tried while down.
			require.Contains(t, []int64{1}, r.Message.Data.Event.Seq)
		}
	}
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(15), st.Delivered)
	require.Zero(t, st.Pending+st.Failed+st.Dead)
}

// A receiver that answers 410 Gone disables its endpoint: no other
// delivery goes to it, and it hears nothing new until enabled again.
func TestGoneDisablesTheEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	rc := newReceiver(t, func(int, *http.Request) int { return http.StatusGone })
	e := endpoint(t, store, rc.URL)
	log := runevents.New(pool)
	escalate(t, log, "wf-1", 1)
	escalate(t, log, "wf-2", 1)
	c := newClock()
	d := webhooks.NewDeliverer(pool, webhooks.Options{Clock: c.Now, Dialer: &loopbackOnly{t: t}, Concurrency: 1})
	drain(t, d, c, time.Hour, 5)
	require.Len(t, rc.requests(), 1, "one 410 and the endpoint is disabled")
	list, err := store.List(ctx, "")
	require.NoError(t, err)
	require.False(t, list[0].DisabledAt.IsZero())
	require.Contains(t, list[0].DisabledReason, "410")
	escalate(t, log, "wf-3", 1)
	ds, err := store.Deliveries(ctx, webhooks.Filter{})
	require.NoError(t, err)
	require.Len(t, ds, 2, "a disabled endpoint hears nothing new")

	rc.setAnswer(func(int, *http.Request) int { return http.StatusNoContent })
	require.NoError(t, store.Enable(ctx, "", e.ID))
	drain(t, d, c, time.Hour, 5)
	require.Len(t, rc.delivered(), 1, "the delivery it held goes out once enabled")
	// The one answered 410 is dead; by hand it goes again.
	for _, x := range ds {
		if x.Status == webhooks.StatusDead {
			require.NoError(t, store.Redeliver(ctx, "", x.ID))
		}
	}
	drain(t, d, c, time.Hour, 5)
	require.Len(t, rc.delivered(), 2)
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, webhooks.Stats{Delivered: 2}, st)
}

// A rotated secret signs beside the new one for 24 hours: a receiver
// holding either verifies; after the day only the new one does.
func TestARotatedSecretSignsForADay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	rc := newReceiver(t, nil)
	old := endpoint(t, store, rc.URL)
	rotated, err := store.Rotate(ctx, "", old.ID)
	require.NoError(t, err)
	require.NotEqual(t, old.Secret, rotated.Secret)
	require.False(t, rotated.PreviousUntil.IsZero())
	log := runevents.New(pool)
	c := newClock()
	d := webhooks.NewDeliverer(pool, webhooks.Options{Clock: c.Now, Dialer: &loopbackOnly{t: t}})

	escalate(t, log, "wf-1", 1)
	drain(t, d, c, time.Second, 3)
	got := rc.delivered()
	require.Len(t, got, 1)
	require.NoError(t, verify(t, old.Secret, got[0]), "the old secret still verifies")
	require.NoError(t, verify(t, rotated.Secret, got[0]), "the new one does")

	c.Advance(25 * time.Hour)
	escalate(t, log, "wf-1", 2)
	drain(t, d, c, time.Second, 3)
	got = rc.delivered()
	require.Len(t, got, 2)
	require.Error(t, verify(t, old.Secret, got[1]), "a day later the old secret signs no more")
	require.NoError(t, verify(t, rotated.Secret, got[1]))
}

// A delivery that fails again and again while its endpoint answers other
// deliveries is retried within a second or two each time: its endpoint's
// failures in a row, not its own count, set the wait.
func TestAnUnluckyDeliveryIsRetriedSoonWhileItsEndpointAnswers(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	c := newClock()
	failures := 0
	rc := newReceiver(t, func(_ int, r *http.Request) int {
		var m webhooks.Message
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &m)
		if m.Data.Run == "wf-unlucky" && failures < 6 {
			failures++
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	endpoint(t, store, rc.URL)
	log := runevents.New(pool)
	escalate(t, log, "wf-unlucky", 0)
	for i := range 40 {
		escalate(t, log, "wf-busy", i)
	}
	d := webhooks.NewDeliverer(pool, webhooks.Options{Clock: c.Now, Dialer: &loopbackOnly{t: t}})
	start := c.Now()
	for range 60 {
		_, err := d.Pass(context.Background())
		require.NoError(t, err)
		c.Advance(time.Second / 2)
	}
	unlucky := 0
	for _, r := range rc.delivered() {
		if r.Message.Data.Run == "wf-unlucky" {
			unlucky++
		}
	}
	// Six waits of at most 2 s each: within 30 s of the fake clock. Waits
	// by the delivery's own attempts (1+2+4+8+16+32 s at most) would
	// mostly not be.
	require.Equal(t, 6, failures)
	require.Equal(t, 1, unlucky, "delivered within %v", c.Now().Sub(start))
}

// An endpoint back from an outage gets every retry it holds at once, with
// its first 2xx, not each at the end of its hour-long backoff.
func TestAnEndpointBackFromAnOutageGetsItsRetriesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	c := newClock()
	rc, down := downFor(t, c, 2*time.Hour)
	endpoint(t, store, rc.URL)
	log := runevents.New(pool)
	for i := range 3 {
		for _, run := range []string{"wf-a", "wf-b", "wf-c", "wf-d"} {
			escalate(t, log, run, i)
		}
	}
	d := webhooks.NewDeliverer(pool, webhooks.Options{Clock: c.Now, Dialer: &loopbackOnly{t: t}})
	for down() {
		_, err := d.Pass(ctx)
		require.NoError(t, err)
		c.Advance(time.Minute)
	}
	for i := 0; len(rc.delivered()) == 0; i++ {
		require.Less(t, i, 120, "nothing delivered within two hours of the receiver's return")
		_, err := d.Pass(ctx)
		require.NoError(t, err)
		c.Advance(time.Minute)
	}
	drain(t, d, c, time.Second, 10)
	require.Len(t, rc.delivered(), 12, "the rest within 10 s of the first 2xx")
}

// downFor is a receiver that answers 502 for the first d of c's time and
// 200 after, and whether it is still down.
func downFor(t *testing.T, c *clock, d time.Duration) (*receiver, func() bool) {
	start := c.Now()
	down := func() bool { return c.Now().Sub(start) < d }
	return newReceiver(t, func(int, *http.Request) int {
		if down() {
			return http.StatusBadGateway
		}
		return http.StatusOK
	}), down
}
