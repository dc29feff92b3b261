package ledgerdb_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// openWorkers opens k ledger stores (k separate pgx pools, as k workers
// would) of conns connections at most each, on one fresh database. A test
// gives its k pools ledgertest.MaxConns between them: with ledgerdb.Open's 32
// a pool, 4 workers' 16 goroutines each once held 64 connections, and
// Postgres refused a client.
func openWorkers(t testing.TB, k, conns int) []*ledgerdb.Store {
	t.Helper()
	url := ledgertest.WithMaxConns(ledgertest.NewDatabase(t), conns)
	stores := make([]*ledgerdb.Store, k)
	for i := range stores {
		store, err := ledgerdb.Open(context.Background(), url)
		require.NoError(t, err)
		t.Cleanup(store.Close)
		stores[i] = store
	}
	return stores
}

func TestBucketTakeDepositLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)

	require.NoError(t, store.EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: 5}))
	for i := range 5 {
		ok, err := ledgertest.TakeRetryToken(ctx, store, "fleet")
		require.NoError(t, err)
		require.True(t, ok, "take %d of a full bucket of 5", i+1)
	}
	ok, err := ledgertest.TakeRetryToken(ctx, store, "fleet")
	require.NoError(t, err)
	assert.False(t, ok, "the sixth take of a bucket of 5 without refill")
	level, err := ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	assert.InDelta(t, 0, level, 1e-9)

	level, err = store.DepositToBucket(ctx, "fleet", 1.5)
	require.NoError(t, err)
	assert.InDelta(t, 1.5, level, 1e-9)
	ok, err = ledgertest.TakeRetryToken(ctx, store, "fleet")
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = ledgertest.TakeRetryToken(ctx, store, "fleet")
	require.NoError(t, err)
	assert.False(t, ok, "half a token is not a token")

	level, err = store.DepositToBucket(ctx, "fleet", 100)
	require.NoError(t, err)
	assert.InDelta(t, 5, level, 1e-9, "deposits are capped at capacity")

	// Ensuring again with a smaller capacity caps the level.
	require.NoError(t, store.EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: 3}))
	level, err = ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	assert.InDelta(t, 3, level, 1e-9)

	// A bucket that does not exist grants nothing and has no level.
	ok, err = ledgertest.TakeRetryToken(ctx, store, "nope")
	require.NoError(t, err)
	assert.False(t, ok)
	_, err = ledgertest.BucketLevel(ctx, store, "nope")
	assert.ErrorIs(t, err, ledgerdb.ErrNotFound)
	_, err = store.DepositToBucket(ctx, "nope", 1)
	assert.ErrorIs(t, err, ledgerdb.ErrNotFound)

	// Bad shapes and amounts are refused before the database.
	assert.Error(t, store.EnsureBucket(ctx, "zero", budget.BucketConfig{Capacity: 0}))
	_, err = store.DepositToBucket(ctx, "fleet", -1)
	assert.Error(t, err)
}

func TestBucketRefillsOverRealTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const refill = 50.0
	require.NoError(t, store.EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: 10, RefillPerSecond: refill}))

	// drain takes tokens until one is refused, and returns how many it got
	// and when the refused take was sent: the bucket held less than one
	// token when Postgres evaluated it, which was no earlier than that.
	drain := func() (int, time.Time) {
		n := 0
		for {
			sent := time.Now()
			ok, err := ledgertest.TakeRetryToken(ctx, store, "fleet")
			require.NoError(t, err)
			if !ok {
				return n, sent
			}
			n++
		}
	}
	first, start := drain()
	require.GreaterOrEqual(t, first, 10)

	time.Sleep(100 * time.Millisecond)
	level, err := ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	got, _ := drain()
	elapsed := time.Since(start).Seconds()

	assert.GreaterOrEqual(t, level, refill*0.1-0.5, "100ms at 50/s refills about 5")
	assert.GreaterOrEqual(t, got, 4)
	assert.LessOrEqual(t, float64(got), 1+refill*elapsed, "no more than the refill over %.3fs", elapsed)
	t.Logf("refilled level after 100ms: %.2f; takes: %d in %.3fs", level, got, elapsed)
}

func TestBucketNeverOverAdmitsAcrossWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const capacity, k, g = 200, 4, 16
	// 16 goroutines a worker contend for 2 connections each: 8 takes in
	// flight from 4 pools at once.
	stores := openWorkers(t, k, ledgertest.MaxConns/k)
	require.NoError(t, stores[0].EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: capacity}))

	var grants atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, k*g)
	for w := range k {
		for range g {
			wg.Go(func() {
				for {
					ok, err := ledgertest.TakeRetryToken(ctx, stores[w], "fleet")
					if err != nil {
						errs <- err
						return
					}
					if !ok {
						return
					}
					grants.Add(1)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.EqualValues(t, capacity, grants.Load(), "%d workers x %d goroutines must grant exactly the capacity", k, g)
}

func TestBucketWithRefillNeverOverAdmits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The refill is below what 32 goroutines (on 8 connections) take even
	// on a loaded 2-core machine (at 100/s a busy CI run once took only 110
	// in 1.3 s and never emptied the bucket), and the load goes on past the
	// second until a take is denied: the bound is only tested once the
	// bucket ran dry.
	const capacity, refill, k, g = 50.0, 20.0, 4, 8
	stores := openWorkers(t, k, ledgertest.MaxConns/k)

	start := time.Now()
	require.NoError(t, stores[0].EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: capacity, RefillPerSecond: refill}))
	deadline, last := start.Add(time.Second), start.Add(10*time.Second)
	var grants, denials atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, k*g)
	for w := range k {
		for range g {
			wg.Go(func() {
				for now := time.Now(); now.Before(deadline) || (denials.Load() == 0 && now.Before(last)); now = time.Now() {
					ok, err := ledgertest.TakeRetryToken(ctx, stores[w], "fleet")
					if err != nil {
						errs <- err
						return
					}
					if ok {
						grants.Add(1)
					} else {
						denials.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	bound := capacity + refill*elapsed + 1e-6
	t.Logf("grants %d, denials %d in %.3fs; bound %.2f", grants.Load(), denials.Load(), elapsed, bound)
	assert.GreaterOrEqual(t, float64(grants.Load()), capacity, "the full bucket is granted")
	assert.LessOrEqual(t, float64(grants.Load()), bound, "grants must not exceed capacity + refill x elapsed")
	assert.Positive(t, denials.Load(), "the load must have emptied the bucket")
}

func retryReq(key, tool string, toolCap int, allowance float64) ledgerdb.RetryRequest {
	return ledgerdb.RetryRequest{
		ChargeKey: "wf-1/" + key, WorkflowID: "wf-1", Tool: tool, ToolCap: toolCap,
		RunAllowance: allowance, Bucket: "fleet", Dependency: "openai",
	}
}

func TestDecideRetryOrderOfDenials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: 10}))

	decide := func(req ledgerdb.RetryRequest) string {
		t.Helper()
		d, err := store.DecideRetry(ctx, req)
		require.NoError(t, err)
		return d
	}
	assert.Equal(t, budget.Granted, decide(retryReq("1/1", "search", 2, 3)))
	assert.Equal(t, budget.Granted, decide(retryReq("1/2", "search", 2, 3)))
	// Both the tool cap (2 of 2) and the run ratio (2 of 2) are spent: the
	// tool cap is consulted first.
	assert.Equal(t, budget.DenyToolCap, decide(retryReq("1/3", "search", 2, 2)))
	// Another tool still has its cap but the run's allowance is spent.
	assert.Equal(t, budget.DenyRunRatio, decide(retryReq("2/1", "fetch", 5, 2)))
	assert.Equal(t, budget.Granted, decide(retryReq("2/2", "fetch", 5, 3)))

	// Open the breaker: the run ratio is still consulted before it.
	cfg := budget.BreakerConfig{Threshold: 1, Window: time.Minute, Cooldown: time.Hour}
	state, err := reportState(store.BreakerReport(ctx, "openai", false, false, cfg))
	require.NoError(t, err)
	require.Equal(t, budget.BreakerOpen, state)
	assert.Equal(t, budget.DenyRunRatio, decide(retryReq("2/3", "fetch", 5, 3)))
	assert.Equal(t, budget.DenyCircuitOpen, decide(retryReq("2/4", "fetch", 5, 10)))
	other := retryReq("3/1", "fetch", 5, 10)
	other.Dependency = "anthropic"
	assert.Equal(t, budget.Granted, decide(other), "another dependency's breaker is closed")

	counters, err := store.RunRetryCounters(ctx, "wf-1")
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.RetryCounters{Retries: 4, ToolRetries: map[string]int{"search": 2, "fetch": 2}}, counters)
	level, err := ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	assert.InDelta(t, 6, level, 1e-9, "only grants take tokens")

	none, err := store.RunRetryCounters(ctx, "wf-none")
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.RetryCounters{}, none)
}

func TestDecideRetryEmptyBucketChargesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: 1}))

	d, err := store.DecideRetry(ctx, retryReq("1/1", "search", 5, 5))
	require.NoError(t, err)
	assert.Equal(t, budget.Granted, d)
	d, err = store.DecideRetry(ctx, retryReq("1/2", "search", 5, 5))
	require.NoError(t, err)
	assert.Equal(t, budget.DenyFleetBucket, d)

	counters, err := store.RunRetryCounters(ctx, "wf-1")
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.RetryCounters{Retries: 1, ToolRetries: map[string]int{"search": 1}}, counters,
		"a denied retry charges the run nothing")

	// The denial is the key's answer even after the bucket refills.
	_, err = store.DepositToBucket(ctx, "fleet", 1)
	require.NoError(t, err)
	d, err = store.DecideRetry(ctx, retryReq("1/2", "search", 5, 5))
	require.NoError(t, err)
	assert.Equal(t, budget.DenyFleetBucket, d)
	level, err := ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	assert.InDelta(t, 1, level, 1e-9)

	// A bucket that does not exist is an error, not a silent denial.
	missing := retryReq("1/3", "search", 5, 5)
	missing.Bucket = "nope"
	_, err = store.DecideRetry(ctx, missing)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wf-1/1/3")
	assert.Contains(t, err.Error(), "does not exist")
}

func TestDecideRetryIsIdempotentPerChargeKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: 10}))

	first, err := store.DecideRetry(ctx, retryReq("1/1", "search", 5, 5))
	require.NoError(t, err)
	again, err := store.DecideRetry(ctx, retryReq("1/1", "search", 5, 5))
	require.NoError(t, err)
	assert.Equal(t, budget.Granted, first)
	assert.Equal(t, first, again)

	// Twenty concurrent deliveries of another attempt pay once.
	var wg sync.WaitGroup
	decisions := make([]string, 20)
	errs := make([]error, 20)
	for i := range decisions {
		wg.Go(func() { decisions[i], errs[i] = store.DecideRetry(ctx, retryReq("1/2", "search", 5, 5)) })
	}
	wg.Wait()
	for i := range decisions {
		require.NoError(t, errs[i])
		assert.Equal(t, budget.Granted, decisions[i])
	}

	counters, err := store.RunRetryCounters(ctx, "wf-1")
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.RetryCounters{Retries: 2, ToolRetries: map[string]int{"search": 2}}, counters)
	level, err := ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	assert.InDelta(t, 8, level, 1e-9, "each charge key takes one token once")

	// A denial is replayed too, even when a later request would be granted.
	denied, err := store.DecideRetry(ctx, retryReq("1/3", "search", 2, 5))
	require.NoError(t, err)
	require.Equal(t, budget.DenyToolCap, denied)
	replay, err := store.DecideRetry(ctx, retryReq("1/3", "search", 5, 5))
	require.NoError(t, err)
	assert.Equal(t, budget.DenyToolCap, replay, "the first delivery's answer stands")
}

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	cfg := budget.BreakerConfig{Threshold: 3, Window: time.Minute, Cooldown: 2 * time.Second} // longer than 20 concurrent calls take on a loaded machine, or a lost probe re-arms

	state, err := stateOf(store.BreakerGate(ctx, "openai", cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerClosed, state, "an unknown dependency's breaker is closed")

	// A dependency that flaps is not down: a success ends the streak, so
	// two failures, a success and two more failures leave it closed.
	for i := range 2 {
		state, err := reportState(store.BreakerReport(ctx, "openai", false, false, cfg))
		require.NoError(t, err)
		assert.Equal(t, budget.BreakerClosed, state, "failure %d of 3", i+1)
	}
	gate, err := store.BreakerGate(ctx, "openai", cfg)
	require.NoError(t, err)
	assert.Equal(t, 2, gate.Failures, "the gate says a streak is on, so the next success is reported")
	state, err = reportState(store.BreakerReport(ctx, "openai", true, false, cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerClosed, state)
	gate, err = store.BreakerGate(ctx, "openai", cfg)
	require.NoError(t, err)
	assert.Zero(t, gate.Failures, "the success ended the streak")
	for range 2 {
		state, err = reportState(store.BreakerReport(ctx, "openai", false, false, cfg))
		require.NoError(t, err)
		assert.Equal(t, budget.BreakerClosed, state, "two in a row after a success are not three")
	}
	// Down: the third failure in a row opens it.
	state, err = reportState(store.BreakerReport(ctx, "openai", false, false, cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerOpen, state, "the third failure in a row within the window opens it")

	opened := time.Now()
	gate, err = store.BreakerGate(ctx, "openai", cfg)
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerOpen, gate.State)
	assert.WithinDuration(t, opened.Add(cfg.Cooldown), gate.RetryAt, time.Second,
		"an open breaker says when its cooldown ends, for the calls it parks")
	open, err := store.OpenBreakers(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"openai"}, open)

	// After the cooldown exactly one of twenty concurrent callers probes.
	time.Sleep(cfg.Cooldown + 50*time.Millisecond)
	probing := time.Now()
	probes := concurrentAllows(t, store, "openai", cfg, 20)
	assert.Equal(t, map[string]int{ledgerdb.BreakerProbe: 1, budget.BreakerOpen: 19}, probes)
	gate, err = store.BreakerGate(ctx, "openai", cfg)
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerOpen, gate.State, "the probe is in flight")
	// While the probe is out, the first parked call looks again within a
	// second of the probe leaving, not a cooldown later; the 19 refused
	// beside the probe took the slots before this one. The slots count
	// from the probe's start, which the twenty concurrent calls on a
	// loaded machine place anywhere between probing and now.
	slot := time.Second + 19*cfg.ReleaseInterval()
	assert.False(t, gate.RetryAt.Before(probing.Add(slot-100*time.Millisecond)), "the call refused after 19 others takes the slot after theirs: %v", gate.RetryAt.Sub(probing))
	assert.False(t, gate.RetryAt.After(time.Now().Add(slot+100*time.Millisecond)), "the call refused after 19 others takes the slot after theirs: %v", gate.RetryAt.Sub(probing))
	open, err = store.OpenBreakers(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"openai"}, open, "half-open counts as open")

	// An outcome that is not the probe's changes nothing.
	state, err = reportState(store.BreakerReport(ctx, "openai", true, false, cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerHalfOpen, state)

	// The probe fails: open for another cooldown.
	state, err = reportState(store.BreakerReport(ctx, "openai", false, true, cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerOpen, state)
	state, err = stateOf(store.BreakerGate(ctx, "openai", cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerOpen, state)

	// The next probe succeeds: closed.
	time.Sleep(cfg.Cooldown + 50*time.Millisecond)
	probes = concurrentAllows(t, store, "openai", cfg, 20)
	assert.Equal(t, map[string]int{ledgerdb.BreakerProbe: 1, budget.BreakerOpen: 19}, probes)
	state, err = reportState(store.BreakerReport(ctx, "openai", true, true, cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerClosed, state)
	state, err = stateOf(store.BreakerGate(ctx, "openai", cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerClosed, state)
	open, err = store.OpenBreakers(ctx)
	require.NoError(t, err)
	assert.Empty(t, open)

	// Closing reset the count: it takes three failures again.
	for range 2 {
		state, err := reportState(store.BreakerReport(ctx, "openai", false, false, cfg))
		require.NoError(t, err)
		assert.Equal(t, budget.BreakerClosed, state)
	}
}

// stateOf is a gate's state, for the tests that need only that.
func stateOf(gate ledgerdb.Gate, err error) (string, error) { return gate.State, err }

func concurrentAllows(t *testing.T, store *ledgerdb.Store, dependency string, cfg budget.BreakerConfig, n int) map[string]int {
	t.Helper()
	states := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { states[i], errs[i] = stateOf(store.BreakerGate(context.Background(), dependency, cfg)) })
	}
	wg.Wait()
	counts := map[string]int{}
	for i := range n {
		require.NoError(t, errs[i])
		counts[states[i]]++
	}
	return counts
}

// The calls an open breaker refuses form a queue: each takes its own
// release slot, the first at the breaker's next probe and each later one a
// release interval after the last, however many ask at once. A queue that
// has drained does not delay the next outage's calls.
func TestOpenBreakerHandsOutReleaseSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	// The twelve calls below must all ask within the cooldown to be parked
	// rather than handed the probe: with a cooldown of 1 s, the third of
	// them came after it in a make test at load 15.
	cfg := budget.BreakerConfig{Threshold: 10, Window: time.Minute, Cooldown: 3 * time.Second}
	interval := cfg.ReleaseInterval()
	require.Equal(t, 100*time.Millisecond, interval, "a new dependency's adaptive release rate starts at 10 a second")
	open := func() time.Time {
		t.Helper()
		for range cfg.Threshold {
			_, err := reportState(store.BreakerReport(ctx, "crm", false, false, cfg))
			require.NoError(t, err)
		}
		return time.Now()
	}
	opened := open()

	const parked = 12
	slots := make([]time.Time, parked)
	errs := make([]error, parked)
	var wg sync.WaitGroup
	for i := range parked {
		wg.Go(func() {
			var gate ledgerdb.Gate
			gate, errs[i] = store.BreakerGate(context.Background(), "crm", cfg)
			if errs[i] == nil && gate.State != budget.BreakerOpen {
				errs[i] = fmt.Errorf("call %d: the open breaker answered %s", i, gate.State)
			}
			slots[i] = gate.RetryAt
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	assert.WithinDuration(t, opened.Add(cfg.Cooldown), slots[0], 500*time.Millisecond, "the first slot is the next probe")
	for i := 1; i < parked; i++ {
		assert.Equal(t, interval, slots[i].Sub(slots[i-1]), "slot %d is one interval after slot %d", i, i-1)
	}
	first, err := store.BreakerGate(ctx, "crm", cfg)
	require.NoError(t, err)
	assert.WithinDuration(t, opened, first.OpenSince, 500*time.Millisecond, "a refusal says since when the outage has kept it open")

	// The probe fails: open for another cooldown, in the same outage.
	time.Sleep(time.Until(first.RetryAt) + 50*time.Millisecond)
	state, err := stateOf(store.BreakerGate(ctx, "crm", cfg))
	require.NoError(t, err)
	require.Equal(t, ledgerdb.BreakerProbe, state)
	state, err = reportState(store.BreakerReport(ctx, "crm", false, true, cfg))
	require.NoError(t, err)
	require.Equal(t, budget.BreakerOpen, state)
	gate, err := store.BreakerGate(ctx, "crm", cfg)
	require.NoError(t, err)
	assert.Equal(t, first.OpenSince, gate.OpenSince, "a failed probe does not start a new outage")

	// The next probe passes and closes the breaker; the queue has drained.
	// The next outage's first call gets the next probe, not a slot behind
	// the old queue, and its own start.
	time.Sleep(time.Until(gate.RetryAt) + 50*time.Millisecond)
	state, err = stateOf(store.BreakerGate(ctx, "crm", cfg))
	require.NoError(t, err)
	require.Equal(t, ledgerdb.BreakerProbe, state)
	state, err = reportState(store.BreakerReport(ctx, "crm", true, true, cfg))
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, state)
	opened = open()
	gate, err = store.BreakerGate(ctx, "crm", cfg)
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerOpen, gate.State)
	assert.WithinDuration(t, opened.Add(cfg.Cooldown), gate.RetryAt, 500*time.Millisecond, "a drained queue delays no one")
	assert.WithinDuration(t, opened, gate.OpenSince, 500*time.Millisecond, "a new outage starts its own clock")
}

func TestBreakerWindowAndLostProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	cfg := budget.BreakerConfig{Threshold: 2, Window: time.Second, Cooldown: time.Second} // wide enough for a loaded machine

	state, err := reportState(store.BreakerReport(ctx, "db", false, false, cfg))
	require.NoError(t, err)
	require.Equal(t, budget.BreakerClosed, state)
	time.Sleep(cfg.Window + 50*time.Millisecond)
	state, err = reportState(store.BreakerReport(ctx, "db", false, false, cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerClosed, state, "a failure outside the window starts a new one")
	state, err = reportState(store.BreakerReport(ctx, "db", false, false, cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerOpen, state)

	time.Sleep(cfg.Cooldown + 50*time.Millisecond)
	state, err = stateOf(store.BreakerGate(ctx, "db", cfg))
	require.NoError(t, err)
	require.Equal(t, ledgerdb.BreakerProbe, state)
	state, err = stateOf(store.BreakerGate(ctx, "db", cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerOpen, state, "the probe is in flight")

	// The probe's worker died: after another cooldown the probe is re-armed.
	time.Sleep(cfg.Cooldown + 50*time.Millisecond)
	state, err = stateOf(store.BreakerGate(ctx, "db", cfg))
	require.NoError(t, err)
	assert.Equal(t, ledgerdb.BreakerProbe, state)

	_, err = stateOf(store.BreakerGate(ctx, "db", budget.BreakerConfig{}))
	assert.Error(t, err, "an invalid breaker config is refused")
}

func TestRecordSuccessDepositsOncePerKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: 2, SuccessBonus: 0.5}))
	for range 2 {
		ok, err := ledgertest.TakeRetryToken(ctx, store, "fleet")
		require.NoError(t, err)
		require.True(t, ok)
	}

	for range 3 {
		require.NoError(t, store.RecordSuccess(ctx, "wf-1/1/1", "fleet", 0.5, "openai", false))
	}
	level, err := ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	assert.InDelta(t, 0.5, level, 1e-9, "one deposit per charge key")

	// A withdrawal and a deposit under one key are separate charges.
	d, err := store.DecideRetry(ctx, ledgerdb.RetryRequest{ChargeKey: "wf-1/2/1", WorkflowID: "wf-1", Tool: "t",
		ToolCap: 5, RunAllowance: 5, Bucket: "fleet", Dependency: "openai"})
	require.NoError(t, err)
	assert.Equal(t, budget.DenyFleetBucket, d)
	require.NoError(t, store.RecordSuccess(ctx, "wf-1/2/1", "fleet", 0.5, "openai", false))
	level, err = ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	assert.InDelta(t, 1, level, 1e-9)

	// Concurrent deliveries of one success deposit once.
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() { errs[i] = store.RecordSuccess(ctx, "wf-1/3/1", "fleet", 0.5, "", false) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	level, err = ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	assert.InDelta(t, 1.5, level, 1e-9)

	// A probe's success closes its breaker.
	cfg := budget.BreakerConfig{Threshold: 1, Window: time.Minute, Cooldown: 100 * time.Millisecond}
	_, err = reportState(store.BreakerReport(ctx, "openai", false, false, cfg))
	require.NoError(t, err)
	time.Sleep(cfg.Cooldown + 50*time.Millisecond)
	state, err := stateOf(store.BreakerGate(ctx, "openai", cfg))
	require.NoError(t, err)
	require.Equal(t, ledgerdb.BreakerProbe, state)
	require.NoError(t, store.RecordSuccess(ctx, "wf-1/4/1", "fleet", 0, "openai", true))
	state, err = stateOf(store.BreakerGate(ctx, "openai", cfg))
	require.NoError(t, err)
	assert.Equal(t, budget.BreakerClosed, state)
}

// A deposit raises the bucket, capped at its capacity, and writes nothing
// when the bucket is full.
func TestDepositUnlessFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.EnsureBucket(ctx, "fleet", budget.BucketConfig{Capacity: 2}))
	updatedAt := func() time.Time {
		var at time.Time
		require.NoError(t, store.Pool().QueryRow(ctx, `SELECT updated_at FROM retry_buckets WHERE name = 'fleet'`).Scan(&at))
		return at
	}
	before := updatedAt()
	wrote, err := store.DepositUnlessFull(ctx, "fleet", 1)
	require.NoError(t, err)
	require.False(t, wrote, "a full bucket takes no write")
	require.Equal(t, before, updatedAt())

	for range 2 {
		ok, err := ledgertest.TakeRetryToken(ctx, store, "fleet")
		require.NoError(t, err)
		require.True(t, ok)
	}
	wrote, err = store.DepositUnlessFull(ctx, "fleet", 1.5)
	require.NoError(t, err)
	require.True(t, wrote)
	level, err := ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	require.InDelta(t, 1.5, level, 1e-9)
	wrote, err = store.DepositUnlessFull(ctx, "fleet", 5)
	require.NoError(t, err)
	require.True(t, wrote)
	level, err = ledgertest.BucketLevel(ctx, store, "fleet")
	require.NoError(t, err)
	require.InDelta(t, 2, level, 1e-9, "capped at capacity")
	_, err = store.DepositUnlessFull(ctx, "fleet", -1)
	require.ErrorContains(t, err, "must not be negative")
}

// reportState is a breaker report's state, for the tests that need only
// that.
func reportState(report ledgerdb.BreakerReport, err error) (string, error) { return report.State, err }

// Calls released from a breaker's queue together (a lagging worker sent
// them at once) each book their own place in the paced line, a release
// interval apart, from several pools at once; a dependency that never had
// a breaker has no line.
func TestBreakerPaceSpacesReleasedCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := openWorkers(t, 3, 2)
	// Slots two seconds apart: a call that reached the ledger after the
	// slot before its own had passed (goroutines and pools slow under the
	// suite's load) would be given now, not its place in the line.
	cfg := budget.BreakerConfig{Threshold: 1, Window: time.Minute, Cooldown: time.Second, Release: 2 * time.Second}
	_, err := stores[0].BreakerReport(ctx, "crm", false, false, cfg) // the breaker's row
	require.NoError(t, err)

	const released = 9
	slots := make([]time.Time, released)
	errs := make([]error, released)
	before := time.Now()
	var wg sync.WaitGroup
	for i := range released {
		wg.Go(func() { slots[i], errs[i] = stores[i%len(stores)].BreakerPace(ctx, "crm", cfg, 0) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	assert.WithinDuration(t, before, slots[0], 2*time.Second, "the first leaves at once")
	for i := 1; i < released; i++ {
		assert.Equal(t, cfg.ReleaseInterval(), slots[i].Sub(slots[i-1]), "place %d is one interval after place %d", i, i-1)
	}

	free, err := stores[0].BreakerPace(ctx, "never-failed", cfg, 0)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), free, 2*time.Second)
}
