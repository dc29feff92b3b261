package activities

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Successes from many calls at once reach the bucket as one statement per
// bucket within the lag, with their whole sum.
func TestSuccessDepositsAccrueAndFlushWithinTheLag(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]float64{}
	flushedAt := make(chan time.Time, 10)
	d := newDepositor(func(_ context.Context, bucket string, amount float64) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		got[bucket] += amount
		flushedAt <- time.Now()
		return true, nil
	}, 200*time.Millisecond)

	start := time.Now()
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.add("fleet", 0.1)
		}()
	}
	wg.Wait()
	mu.Lock()
	require.Empty(t, got, "nothing is written at the success itself")
	mu.Unlock()
	select {
	case at := <-flushedAt:
		require.Less(t, at.Sub(start), time.Second, "flushed within the lag (and the test's slack)")
	case <-time.After(5 * time.Second):
		t.Fatal("the deposits were never flushed")
	}
	mu.Lock()
	require.InDelta(t, 10, got["fleet"], 1e-9, "the whole sum, once")
	mu.Unlock()
	require.Equal(t, 1, d.statements(), "one statement for a hundred successes")

	d.add("fleet", 0) // nothing to deposit, nothing scheduled
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 1, d.statements())
}
