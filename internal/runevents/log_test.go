package runevents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), ledgertest.NewPooledDatabase(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func delta(key, text string) runevents.Event {
	data, _ := json.Marshal(map[string]string{"text": text})
	return runevents.Event{Key: key, Kind: runevents.TextDelta, CallKey: "wf/model-1", Data: data}
}

// A publish that is retried stores nothing twice, and a run's events are
// numbered 1, 2, 3... in their order; a reader picks up after any of them.
func TestAPublishRetriedIsStoredOnce(t *testing.T) {
	ctx := context.Background()
	log := runevents.New(newPool(t))
	added, err := log.Publish(ctx, "wf", delta("a", "Hel"), delta("b", "lo"), runevents.Event{Key: "t", Kind: runevents.TurnStarted})
	require.NoError(t, err)
	require.EqualValues(t, 3, added)
	// The same batch again (an attempt that published, then died before it
	// could say so), and one new event among old ones.
	added, err = log.Publish(ctx, "wf", delta("a", "Hel"), delta("b", "lo"), runevents.Event{Key: "t", Kind: runevents.TurnStarted})
	require.NoError(t, err)
	require.Zero(t, added)
	added, err = log.Publish(ctx, "wf", delta("b", "lo"), delta("c", "!"), delta("c", "!"))
	require.NoError(t, err)
	require.EqualValues(t, 1, added, "a key twice in one batch is one event")

	events, err := log.Read(ctx, "wf", 0, 100)
	require.NoError(t, err)
	var keys []string
	for i, e := range events {
		assert.EqualValues(t, i+1, e.Seq)
		keys = append(keys, e.Key)
	}
	require.Equal(t, []string{"a", "b", "t", "c"}, keys)
	require.JSONEq(t, `{"text":"Hel"}`, string(events[0].Data))
	require.Empty(t, events[2].Data, "an event may carry no data")
	require.Equal(t, "wf/model-1", events[0].CallKey)

	after, err := log.Read(ctx, "wf", 2, 1)
	require.NoError(t, err)
	require.Len(t, after, 1)
	require.Equal(t, "t", after[0].Key)
	other, err := log.Read(ctx, "another-run", 0, 10)
	require.NoError(t, err)
	require.Empty(t, other, "each run has a log of its own")
}

// Bad input is refused whole, naming what is wrong, and stores nothing.
func TestABadEventIsRefusedWhole(t *testing.T) {
	ctx := context.Background()
	log := runevents.New(newPool(t))
	_, err := log.Publish(ctx, "wf", delta("a", "x"), runevents.Event{Key: "b"})
	require.ErrorContains(t, err, "event 1 has no key or no kind")
	_, err = log.Publish(ctx, "wf", runevents.Event{Key: "c", Kind: runevents.TextDelta, Data: json.RawMessage("{not json")})
	require.ErrorContains(t, err, "publish c of wf: its data is not JSON")
	events, err := log.Read(ctx, "wf", 0, 10)
	require.NoError(t, err)
	require.Empty(t, events)
	_, err = log.Read(ctx, "wf", 0, 0)
	require.ErrorContains(t, err, "limit must be positive")
}

// Publishers of one run side by side (a turn's tool calls, a retried
// attempt beside its first) leave a log numbered without gaps, each key
// once, each publisher's events in its order: a reader that read through N
// and asks for what follows misses nothing.
func TestConcurrentPublishersLeaveNoGapsAndNoDuplicates(t *testing.T) {
	ctx := context.Background()
	log := runevents.New(newPool(t))
	const publishers, batches, perBatch = 6, 15, 4
	var wg sync.WaitGroup
	for p := range publishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				var batch []runevents.Event
				for i := range perBatch {
					batch = append(batch, delta(fmt.Sprintf("p%d-%03d", p, b*perBatch+i), "x"))
				}
				// Every other publish is sent twice, as a retry would.
				for range 1 + b%2 {
					_, err := log.Publish(ctx, "wf", batch...)
					assert.NoError(t, err)
				}
			}
		}()
	}
	// A reader follows along while they publish, reading pages after the
	// last seq it saw: it must see every event once, in seq order.
	seen := map[string]int64{}
	var last int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; ; {
		select {
		case <-done:
			finished = true
		default:
		}
		events, err := log.Read(ctx, "wf", last, 7)
		require.NoError(t, err)
		for _, e := range events {
			require.Equal(t, last+1, e.Seq, "no gap after %d", last)
			_, dup := seen[e.Key]
			require.False(t, dup, "key %s read twice", e.Key)
			seen[e.Key], last = e.Seq, e.Seq
		}
		if finished && len(events) == 0 {
			break
		}
	}
	require.Len(t, seen, publishers*batches*perBatch)
	for p := range publishers {
		for i := 1; i < batches*perBatch; i++ {
			require.Less(t, seen[fmt.Sprintf("p%d-%03d", p, i-1)], seen[fmt.Sprintf("p%d-%03d", p, i)])
		}
	}
}

// A follower is woken by the hub when its run's log grows, long before its
// poll would have read again, and reads on from its offset; a follower of
// another run is not handed the first run's events.
func TestFollowIsWokenByTheHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := newPool(t)
	log, hub := runevents.New(pool), runevents.NewHub(pool)
	go hub.Run(ctx, func(err error) { t.Log(err) })
	_, err := log.Publish(ctx, "wf", delta("old", "seen before"))
	require.NoError(t, err)

	got := make(chan runevents.Event, 10)
	followCtx, stopFollowing := context.WithCancel(ctx)
	followed := make(chan error, 2)
	go func() {
		// A poll of an hour: only the hub can wake it.
		followed <- runevents.Follow(followCtx, log, hub, "wf", 1, time.Hour, func(e runevents.Event) error { got <- e; return nil })
	}()
	go func() {
		followed <- runevents.Follow(followCtx, log, hub, "other", 0, time.Hour, func(e runevents.Event) error {
			return fmt.Errorf("handed %s of another run", e.Key)
		})
	}()
	// The hub's LISTEN may come after the follower's first read: publish
	// until the follower has the event (a publish of a key already held
	// is skipped, so there is still one event).
	deadline := time.After(30 * time.Second)
	for {
		_, err := log.Publish(ctx, "wf", delta("new", "live"))
		require.NoError(t, err)
		select {
		case e := <-got:
			require.Equal(t, "new", e.Key)
			require.EqualValues(t, 2, e.Seq)
			stopFollowing()
			require.NoError(t, <-followed)
			require.NoError(t, <-followed)
			select {
			case e := <-got:
				t.Fatalf("read %s twice", e.Key)
			default:
			}
			return
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("the follower was not woken in 30 s")
		}
	}
}
