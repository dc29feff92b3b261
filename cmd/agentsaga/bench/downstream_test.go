package bench_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

func get(t *testing.T, d *bench.Downstream, key string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.URL(), nil)
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

func TestDownstreamFailureRateOutageAndCounts(t *testing.T) {
	t.Parallel()
	d, err := bench.StartDownstream(bench.Faults{FailureRate: 0.2}, 1)
	require.NoError(t, err)
	defer d.Close()
	failures := 0
	for i := range 1000 {
		if get(t, d, fmt.Sprintf("k%d", i%10)) != http.StatusOK {
			failures++
		}
	}
	counts := d.Counts()
	assert.Equal(t, 1000, counts.Requests)
	assert.Equal(t, failures, counts.Failures)
	assert.InDelta(t, 200, failures, 50, "about 20% fail")
	assert.Equal(t, 10, counts.Keys)
	assert.Equal(t, 100, counts.ByKey["k3"])

	outage, err := bench.StartDownstream(bench.Faults{Outages: []bench.Window{{From: 0, To: time.Hour}}}, 1)
	require.NoError(t, err)
	defer outage.Close()
	assert.Equal(t, http.StatusServiceUnavailable, get(t, outage, "x"))
}

func TestDownstreamCapacityKeepsOverloadFailing(t *testing.T) {
	t.Parallel()
	d, err := bench.StartDownstream(bench.Faults{Capacity: 2, Latency: 200 * time.Millisecond}, 1)
	require.NoError(t, err)
	defer d.Close()
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Add(1)
		go func() { defer wg.Done(); statuses[i] = get(t, d, fmt.Sprint(i)) }()
	}
	wg.Wait()
	ok := 0
	for _, s := range statuses {
		if s == http.StatusOK {
			ok++
		}
	}
	assert.LessOrEqual(t, ok, 2, "no more than capacity served at once")
	assert.GreaterOrEqual(t, d.Counts().Failures, 6)
}

// A rate limit serves that many requests in a second and fails the rest.
func TestDownstreamRatePerSecond(t *testing.T) {
	t.Parallel()
	d, err := bench.StartDownstream(bench.Faults{RatePerSecond: 5}, 1)
	require.NoError(t, err)
	defer d.Close()
	ok := 0
	for i := range 20 {
		if get(t, d, fmt.Sprint(i)) == http.StatusOK {
			ok++
		}
	}
	// The 20 requests may straddle one second boundary, not two.
	assert.GreaterOrEqual(t, ok, 5)
	assert.LessOrEqual(t, ok, 10)
	assert.Equal(t, 20-ok, d.Counts().Failures)
}

// The counts endpoint reports requests by key and by attempt, and is not
// counted itself.
func TestDownstreamCountsEndpoint(t *testing.T) {
	t.Parallel()
	d, err := bench.StartDownstream(bench.Faults{}, 1)
	require.NoError(t, err)
	defer d.Close()
	for attempt := 1; attempt <= 3; attempt++ {
		req, err := http.NewRequest(http.MethodPost, d.URL(), nil)
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "run-1/call-1")
		req.Header.Set(bench.AttemptHeader, fmt.Sprint(attempt))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	resp, err := http.Get(d.URL() + bench.CountsPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	var counts bench.Counts
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&counts))
	assert.Equal(t, 3, counts.Requests)
	assert.Equal(t, map[string]int{"run-1/call-1": 3}, counts.ByKey)
	assert.Equal(t, map[int]int{1: 1, 2: 1, 3: 1}, counts.ByAttempt)
}
