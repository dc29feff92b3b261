package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// publishMany publishes perRun escalations to each of runs runs, the runs
// interleaved, ten events a statement, from a goroutine a run.
func publishMany(t testing.TB, log *runevents.Log, runs, perRun int) {
	t.Helper()
	var wg sync.WaitGroup
	for r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := fmt.Sprintf("wf-%d", r)
			for i := 0; i < perRun; i += 10 {
				var batch []runevents.Event
				for j := i; j < min(i+10, perRun); j++ {
					batch = append(batch, escalation(run, j))
				}
				_, err := log.Publish(context.Background(), run, batch...)
				require.NoError(t, err)
			}
		}()
	}
	wg.Wait()
}

// checkOncePerRunInOrder checks that the receiver got want events, each
// once, and each run's in the order of its log.
func checkOncePerRunInOrder(t testing.TB, rc *receiver, want int) {
	t.Helper()
	got := rc.delivered()
	require.Len(t, got, want)
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, r := range got {
		require.False(t, seen[r.ID], "delivered twice: %s", r.ID)
		seen[r.ID] = true
		run := r.Message.Data.Run
		require.Greater(t, r.Message.Data.Event.Seq, last[run], "%s out of order", run)
		last[run] = r.Message.Data.Event.Seq
	}
}

// runDeliverers runs n deliverers until the test ends.
func runDeliverers(t testing.TB, pool interface{}, ds ...*webhooks.Deliverer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = d.Run(ctx)
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// waitDelivered waits until the outbox has delivered n.
func waitDelivered(t testing.TB, store *webhooks.Store, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := store.Stats(context.Background())
		return err == nil && st.Delivered == n
	}, 90*time.Second, 20*time.Millisecond)
}

// A thousand events to a slow receiver: the deliverer holds no more than
// its concurrency in flight (memory stays bounded), delivers each once,
// and keeps each run's order.
func TestAThousandEventsToASlowReceiver(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	var inFlight, most atomic.Int64
	rc := newReceiver(t, func(int, *http.Request) int {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		return http.StatusOK
	})
	endpoint(t, store, rc.URL)
	const concurrency = 8
	d := webhooks.NewDeliverer(pool, webhooks.Options{Concurrency: concurrency, Dialer: &loopbackOnly{t: t}})

	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	runDeliverers(t, pool, d)
	publishMany(t, runevents.New(pool), 20, 50)
	waitDelivered(t, store, 1000)
	close(stop)
	<-sampled

	checkOncePerRunInOrder(t, rc, 1000)
	require.LessOrEqual(t, most.Load(), int64(concurrency), "no more in flight than its concurrency")
	t.Logf("most in flight %d, peak heap in use %d MiB", most.Load(), peak.Load()>>20)
	require.Less(t, peak.Load(), uint64(256<<20), "memory stays bounded")
}

// Several processes deliver one outbox: each delivery goes once, each
// run's in order. (Run it with -race.)
func TestSeveralDeliverersShareTheOutbox(t *testing.T) {
	t.Parallel()
	pool := newPool(t)
	store := webhooks.NewStore(pool)
	rc := newReceiver(t, nil)
	endpoint(t, store, rc.URL)
	var ds []*webhooks.Deliverer
	for i := range 3 {
		ds = append(ds, webhooks.NewDeliverer(pool, webhooks.Options{Owner: fmt.Sprintf("p%d", i), Concurrency: 4, Dialer: &loopbackOnly{t: t}}))
	}
	runDeliverers(t, pool, ds...)
	publishMany(t, runevents.New(pool), 10, 30)
	waitDelivered(t, store, 300)
	checkOncePerRunInOrder(t, rc, 300)
	owners := map[string]bool{}
	list, err := store.Deliveries(context.Background(), webhooks.Filter{Limit: 300, Attempts: true})
	require.NoError(t, err)
	for _, x := range list {
		require.Len(t, x.Tries, 1)
		owners[x.Tries[0].Owner] = true
	}
	t.Logf("delivered by %d processes", len(owners))
}
