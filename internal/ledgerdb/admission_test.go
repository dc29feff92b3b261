package ledgerdb_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Admission by run (migration 00029, issue 43), at the ledger: runs are
// put in their root account's queue and admitted whole, by any number of
// processes at once. Each test checks the invariants after it, and logs
// their violations: no run admitted twice, every period row holds exactly
// what the admitted runs and the calls in flight hold in it, no period
// spends or holds more than its cap, and, once every run has ended,
// nothing is held at all.

func logAdmissions(t *testing.T, store *ledgerdb.Store) { ledgertest.LogAdmissions(t, store) }

func admittedOrder(t *testing.T, store *ledgerdb.Store) []string {
	return ledgertest.AdmittedOrder(t, store)
}

func admissionViolations(ctx context.Context, t *testing.T, store *ledgerdb.Store, ended bool) int {
	return ledgertest.AdmissionViolations(ctx, t, store, ended)
}

// admitReq is a run of account's "spec" with budget usd.
func admitReq(id, account string, usd float64, priority int) wire.AdmitRequest {
	return wire.AdmitRequest{RunID: id, Account: account, SpecKey: "spec", Priority: priority, BudgetUSD: usd}
}

// startQueued records the run's start, as its first activity does, and
// asks to admit it.
func startQueued(ctx context.Context, t *testing.T, store *ledgerdb.Store, req wire.AdmitRequest) wire.Admission {
	t.Helper()
	require.NoError(t, store.StartRun(ctx, agentsagatype.Run{WorkflowID: req.RunID, RunID: "r-" + req.RunID, Goal: "g"}))
	adm, err := store.AdmitRun(ctx, req)
	require.NoError(t, err)
	return adm
}

// endRun records the run's end, as its last activity does: the trigger
// on runs ends its admission.
func endRun(ctx context.Context, t *testing.T, store *ledgerdb.Store, id, status string) {
	t.Helper()
	require.NoError(t, store.FinishRun(ctx, id, agentsagatype.RunOutcome{Status: status}))
}

// spendOn makes one call of the run: it reserves usd and settles cost.
func spendOn(ctx context.Context, t *testing.T, store *ledgerdb.Store, id, account string, step int, usd, cost float64) bool {
	t.Helper()
	key := fmt.Sprintf("%s/step-%03d-model", id, step)
	r, err := store.ReserveSpend(ctx, key, account, usd, time.Minute)
	require.NoError(t, err)
	if !r.Admitted {
		return false
	}
	_, err = store.SettleSpend(ctx, key, cost)
	require.NoError(t, err)
	return true
}

func admissionStatus(ctx context.Context, t *testing.T, store *ledgerdb.Store, id string) (status string, held float64) {
	t.Helper()
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT status, held::float8 FROM run_admissions WHERE run_id = $1`, id).Scan(&status, &held))
	return status, held
}

// admissionFleet runs a fleet of processes (pools of their own) admitting
// runs at once: in each pool, goroutines start runs one after another
// (admit, wait queued asking again now and then, make calls that draw on
// the reservation and past it, end), some of them cancelled after waiting
// too long, and a loop runs passes over the queued roots as the
// admission loop does. A sampler watches the concurrency limits.
type admissionFleet struct {
	pools, goroutines, runs int
	// accounts are where runs are charged, one at random per run.
	accounts []string
	// budget is each run's budget.usd; calls make up to 3 calls each of
	// up to call USD, costing a tenth of that at most.
	budget, call float64
	// quotaMax, when set, is the model's max_concurrent_runs, for every
	// run.
	quotaMax int
	// limits are the max_concurrent_runs the sampler checks, by account.
	limits map[string]int
}

// total is how many runs the fleet starts.
func (f admissionFleet) total() int { return f.pools * f.goroutines * f.runs }

type fleetResult struct {
	admitted, cancelled, refusedCalls, overLimit atomic.Int64
}

func (f admissionFleet) run(ctx context.Context, t *testing.T, stores []*ledgerdb.Store) *fleetResult {
	t.Helper()
	res := &fleetResult{}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var loops sync.WaitGroup
	for _, store := range stores {
		loops.Go(func() {
			for ctx.Err() == nil {
				roots, _, err := store.QueuedRoots(ctx)
				if err == nil {
					for _, root := range roots {
						if _, err := store.AdmitQueued(ctx, root); err != nil && ctx.Err() == nil {
							t.Errorf("pass over %s: %v", root, err)
						}
					}
				} else if ctx.Err() == nil {
					t.Errorf("queued roots: %v", err)
				}
				ids, err := store.UnsignalledAdmissions(ctx, 100)
				if err == nil && len(ids) > 0 {
					err = store.MarkSignalled(ctx, ids)
				}
				if err != nil && ctx.Err() == nil {
					t.Errorf("signal: %v", err)
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(2+rand.IntN(8)) * time.Millisecond):
				}
			}
		})
	}
	loops.Go(func() { // the sampler
		for ctx.Err() == nil {
			rows, err := stores[0].Pool().Query(ctx, `
				SELECT w.account, (SELECT count(*) FROM run_admissions r WHERE r.status = 'admitted'
				                   AND (r.account = w.account OR starts_with(r.account, w.account || '/')))
				FROM admission_accounts w WHERE w.max_concurrent_runs IS NOT NULL
				UNION ALL
				SELECT 'model:' || quota_key, count(*) FROM run_admissions WHERE status = 'admitted' AND quota_max IS NOT NULL
				GROUP BY quota_key`)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("sample: %v", err)
				}
				return
			}
			for rows.Next() {
				var account string
				var running int
				if err := rows.Scan(&account, &running); err != nil {
					t.Errorf("sample: %v", err)
					break
				}
				limit, ok := f.limits[account]
				if strings.HasPrefix(account, "model:") {
					limit, ok = f.quotaMax, true
				}
				if ok && running > limit {
					res.overLimit.Add(1)
					t.Errorf("violation: %s runs %d of its %d concurrent runs", account, running, limit)
				}
			}
			rows.Close()
		}
	})
	var wg sync.WaitGroup
	for p, store := range stores {
		for g := range f.goroutines {
			wg.Go(func() {
				for n := range f.runs {
					if err := f.oneRun(ctx, store, fmt.Sprintf("run-p%d-g%d-%03d", p, g, n), res); err != nil {
						t.Errorf("run p%d g%d %d: %v", p, g, n, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	stop()
	loops.Wait()
	return res
}

func (f admissionFleet) oneRun(ctx context.Context, store *ledgerdb.Store, id string, res *fleetResult) error {
	account := f.accounts[rand.IntN(len(f.accounts))]
	if err := store.StartRun(ctx, agentsagatype.Run{WorkflowID: id, RunID: "r-" + id, Goal: "g"}); err != nil {
		return err
	}
	req := wire.AdmitRequest{RunID: id, Account: account, SpecKey: "spec", Priority: 1 + rand.IntN(5), BudgetUSD: f.budget}
	if f.quotaMax > 0 {
		req.QuotaKey, req.QuotaMax = "openai:gpt-4o-mini", f.quotaMax
	}
	adm, err := store.AdmitRun(ctx, req)
	if err != nil {
		return err
	}
	giveUp := time.Now().Add(time.Duration(200+rand.IntN(800)) * time.Millisecond)
	for adm.Status == wire.AdmissionQueued {
		time.Sleep(time.Duration(1+rand.IntN(10)) * time.Millisecond)
		if time.Now().After(giveUp) {
			err := store.CancelQueued(ctx, id)
			if err == nil {
				res.cancelled.Add(1)
				return store.FinishRun(ctx, id, agentsagatype.RunOutcome{Status: agentsagatype.RunFailed, Reason: "cancelled"})
			}
			if !errors.Is(err, ledgerdb.ErrNotQueued) {
				return err
			}
		}
		req.Waited = true
		if adm, err = store.AdmitRun(ctx, req); err != nil {
			return err
		}
	}
	if adm.Status != wire.AdmissionAdmitted {
		return fmt.Errorf("admission %s", adm.Status)
	}
	res.admitted.Add(1)
	for step := range 1 + rand.IntN(3) {
		key := fmt.Sprintf("%s/step-%03d-model", id, step)
		usd := f.call * (0.2 + 0.8*rand.Float64())
		r, err := store.ReserveSpend(ctx, key, account, usd, time.Minute)
		if err != nil {
			return err
		}
		if !r.Admitted {
			res.refusedCalls.Add(1)
			break
		}
		if _, err := store.SettleSpend(ctx, key, usd*0.1*rand.Float64()); err != nil {
			return err
		}
	}
	return store.FinishRun(ctx, id, agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted})
}

// Many processes admit runs against one capped account tree at once
// (acme's $3 a day; acme/support's $2): a run is admitted when the caps
// hold its $0.30, its calls draw on that first and, past it, on the caps,
// and room frees as runs end. No run is admitted twice, the periods hold
// exactly what runs and calls hold, no cap is passed, and once every run
// has ended nothing is held.
func TestAdmissionHoldsAcrossPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := openWorkers(t, 4, 3)
	logAdmissions(t, stores[0])
	for _, c := range []ledgerdb.SpendCap{
		{Account: "acme", Period: ledgerdb.SpendDay, USD: 3},
		{Account: "acme/support", Period: ledgerdb.SpendDay, USD: 2, FinishReserve: 0.1},
	} {
		_, err := stores[0].SetSpendCap(ctx, c, "test")
		require.NoError(t, err)
	}
	fleet := admissionFleet{pools: 4, goroutines: 4, runs: 8, accounts: []string{"acme/support", "acme/sales", "acme"},
		budget: 0.3, call: 0.25}
	res := fleet.run(ctx, t, stores)
	violations := admissionViolations(ctx, t, stores[0], true)
	var admissions int
	require.NoError(t, stores[0].Pool().QueryRow(ctx, `SELECT count(*) FROM test_admissions`).Scan(&admissions))
	t.Logf("%d runs: %d admitted (%d admissions logged), %d cancelled while queued, %d calls refused; violations=%d",
		fleet.total(), res.admitted.Load(), admissions, res.cancelled.Load(), res.refusedCalls.Load(), violations)
	assert.Zero(t, violations)
	assert.EqualValues(t, fleet.total(), res.admitted.Load()+res.cancelled.Load(), "every run was admitted or cancelled")
	assert.EqualValues(t, res.admitted.Load(), admissions)
	var waited int
	require.NoError(t, stores[0].Pool().QueryRow(ctx, `SELECT count(*) FROM run_admissions WHERE admitted_at > enqueued_at + interval '1 millisecond'`).Scan(&waited))
	assert.Positive(t, waited, "the caps made runs wait")
}

// Many root accounts at once, each with a cap of its own, half of them
// with max_concurrent_runs, and every run on one model whose
// max_concurrent_runs binds across roots.
func TestAdmissionHoldsAcrossAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := openWorkers(t, 4, 3)
	logAdmissions(t, stores[0])
	var accounts []string
	limits := map[string]int{}
	for i := range 8 {
		root := fmt.Sprintf("team%d", i)
		_, err := stores[0].SetSpendCap(ctx, ledgerdb.SpendCap{Account: root, Period: ledgerdb.SpendMonth, USD: 1}, "test")
		require.NoError(t, err)
		if i%2 == 0 {
			limits[root] = 2
			require.NoError(t, stores[0].SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: root, MaxConcurrentRuns: 2, Weight: 1 + i}, "test"))
		}
		accounts = append(accounts, root, root+"/a", root+"/b")
	}
	// An account whose name is a LIKE pattern of another's holds none of
	// its runs.
	limits["team_"] = 1
	require.NoError(t, stores[0].SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "team_", MaxConcurrentRuns: 1}, "test"))
	fleet := admissionFleet{pools: 4, goroutines: 4, runs: 6, accounts: accounts, budget: 0.2, call: 0.15, quotaMax: 12, limits: limits}
	res := fleet.run(ctx, t, stores)
	violations := admissionViolations(ctx, t, stores[0], true) + int(res.overLimit.Load())
	t.Logf("%d runs over %d accounts: %d admitted, %d cancelled while queued, %d calls refused; violations=%d",
		fleet.total(), len(accounts), res.admitted.Load(), res.cancelled.Load(), res.refusedCalls.Load(), violations)
	assert.Zero(t, violations)
	assert.EqualValues(t, fleet.total(), res.admitted.Load()+res.cancelled.Load(), "every run was admitted or cancelled")
}

// A capped account's queue is FIFO: as room frees, the runs that waited
// are admitted in the order they came, and each says its place and why it
// waits.
func TestAdmissionIsFIFO(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}, "test")
	require.NoError(t, err)
	for i := range 6 {
		adm := startQueued(ctx, t, store, admitReq(fmt.Sprintf("fifo-%d", i), "acme/support", 0.4, 3))
		if i < 2 {
			assert.Equal(t, wire.AdmissionAdmitted, adm.Status, "run %d fits", i)
			continue
		}
		assert.Equal(t, wire.AdmissionQueued, adm.Status)
		assert.Equal(t, i-1, adm.Place)
		assert.InDelta(t, 0.4, adm.EstimateUSD, 1e-9)
		reason := `account acme has \$0\.2000 of its \$1\.0000 per month spend cap for runs \(\$0\.0000 spent, \$0\.8000 held\), and the run is estimated at \$0\.4000; .* or at \d{4}-\d\d-01 00:00:00 UTC$`
		if i == 2 {
			assert.Regexp(t, "^"+reason, adm.Reason)
		} else {
			assert.Regexp(t, "^behind run fifo-2, which waits: "+reason, adm.Reason, "the runs behind the first say what they wait for")
		}
	}
	queue, err := store.ListQueue(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, queue, 4)
	for i, q := range queue {
		assert.Equal(t, fmt.Sprintf("fifo-%d", i+2), q.RunID)
		assert.Equal(t, i+1, q.Place)
	}
	for i := range 4 {
		assert.True(t, spendOn(ctx, t, store, fmt.Sprintf("fifo-%d", i), "acme/support", 1, 0.1, 0.05))
		endRun(ctx, t, store, fmt.Sprintf("fifo-%d", i), agentsagatype.RunCompleted)
		_, err := store.AdmitQueued(ctx, "acme")
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"fifo-0", "fifo-1", "fifo-2", "fifo-3", "fifo-4", "fifo-5"}, admittedOrder(t, store))
	for _, id := range []string{"fifo-4", "fifo-5"} {
		endRun(ctx, t, store, id, agentsagatype.RunCompleted)
	}
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// Priority orders the queue (1 first), FIFO within a priority.
func TestAdmissionFollowsPriority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}, "test")
	require.NoError(t, err)
	assert.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("first", "acme", 1, 3)).Status)
	priorities := map[string]int{"p5": 5, "p3a": 3, "p1": 1, "p3b": 3, "p2": 2}
	for _, id := range []string{"p5", "p3a", "p1", "p3b", "p2"} {
		assert.Equal(t, wire.AdmissionQueued, startQueued(ctx, t, store, admitReq(id, "acme", 1, priorities[id])).Status)
	}
	queue, err := store.ListQueue(ctx, "")
	require.NoError(t, err)
	var places []string
	for _, q := range queue {
		places = append(places, q.RunID)
	}
	assert.Equal(t, []string{"p1", "p2", "p3a", "p3b", "p5"}, places)
	_, err = store.AdmitRun(ctx, admitReq("bad", "acme", 1, 6))
	assert.Error(t, err, "priority 6")
	prev := "first"
	for range 5 {
		endRun(ctx, t, store, prev, agentsagatype.RunCompleted)
		n, err := store.AdmitQueued(ctx, "acme")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		order := admittedOrder(t, store)
		prev = order[len(order)-1]
	}
	endRun(ctx, t, store, prev, agentsagatype.RunCompleted)
	assert.Equal(t, []string{"first", "p1", "p2", "p3a", "p3b", "p5"}, admittedOrder(t, store))
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// Two accounts under one root whose max_concurrent_runs is 1 share it by
// weight: acme/a (weight 2) is admitted twice for each of acme/b's runs
// (weight 1), whatever order their runs came in.
func TestAdmissionRoundRobinByWeight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	require.NoError(t, store.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme", MaxConcurrentRuns: 1}, "test"))
	require.NoError(t, store.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme/a", Weight: 2}, "test"))
	require.NoError(t, store.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme/b", Weight: 1}, "test"))
	w, inFlight, err := store.AccountShare(ctx, "acme/a/x", 10)
	require.NoError(t, err)
	assert.Equal(t, 2, w, "a child has its parent's weight")
	assert.Zero(t, inFlight)
	assert.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("a-00", "acme/a", 0, 3)).Status)
	// acme/a floods the queue first; acme/b comes after.
	for i := 1; i <= 12; i++ {
		adm := startQueued(ctx, t, store, admitReq(fmt.Sprintf("a-%02d", i), "acme/a", 0, 3))
		assert.Equal(t, wire.AdmissionQueued, adm.Status)
		assert.Contains(t, adm.Reason, "account acme runs 1 of its 1 concurrent runs")
	}
	for i := 1; i <= 6; i++ {
		assert.Equal(t, wire.AdmissionQueued, startQueued(ctx, t, store, admitReq(fmt.Sprintf("b-%02d", i), "acme/b", 0, 3)).Status)
	}
	prev := "a-00"
	for range 9 {
		endRun(ctx, t, store, prev, agentsagatype.RunCompleted)
		n, err := store.AdmitQueued(ctx, "acme")
		require.NoError(t, err)
		require.Equal(t, 1, n, "one place freed")
		order := admittedOrder(t, store)
		prev = order[len(order)-1]
	}
	order := admittedOrder(t, store)[1:]
	t.Logf("admitted: %v", order)
	a, b := 0, 0
	for _, id := range order {
		if strings.HasPrefix(id, "a-") {
			a++
		} else {
			b++
		}
	}
	assert.Equal(t, 6, a, "acme/a had two places in three")
	assert.Equal(t, 3, b, "acme/b had one place in three, though its runs came after acme/a's twelve")
	assert.True(t, strings.HasPrefix(order[0], "b-") || strings.HasPrefix(order[1], "b-"),
		"acme/b's first run is admitted among the first two: %v", order)
	// End the rest: cancel what waits.
	endRun(ctx, t, store, prev, agentsagatype.RunCompleted)
	queue, err := store.ListQueue(ctx, "acme")
	require.NoError(t, err)
	for _, q := range queue {
		require.NoError(t, store.CancelQueued(ctx, q.RunID))
	}
	_, err = store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	_, admitted, err := store.AdmissionHeld(ctx)
	require.NoError(t, err)
	assert.Zero(t, admitted)
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// An account that had the root to itself for long does not owe its idle
// rivals: a newcomer (no row in admission_accounts yet) starts level with
// the least served account waiting, and the two alternate.
func TestAdmissionNewcomerStartsLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	require.NoError(t, store.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme", MaxConcurrentRuns: 1}, "test"))
	prev := ""
	for i := range 10 { // acme/a runs ten runs alone, one at a time
		id := fmt.Sprintf("a-%02d", i)
		if prev != "" {
			endRun(ctx, t, store, prev, agentsagatype.RunCompleted)
		}
		require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq(id, "acme/a", 0, 3)).Status, id)
		prev = id
	}
	for i := 10; i < 16; i++ {
		startQueued(ctx, t, store, admitReq(fmt.Sprintf("a-%02d", i), "acme/a", 0, 3))
	}
	for i := range 6 {
		startQueued(ctx, t, store, admitReq(fmt.Sprintf("b-%02d", i), "acme/b", 0, 3))
	}
	for range 8 {
		endRun(ctx, t, store, prev, agentsagatype.RunCompleted)
		_, err := store.AdmitQueued(ctx, "acme")
		require.NoError(t, err)
		order := admittedOrder(t, store)
		prev = order[len(order)-1]
	}
	order := admittedOrder(t, store)[10:]
	t.Logf("admitted after acme/a's ten: %v", order)
	b := 0
	for _, id := range order {
		if strings.HasPrefix(id, "b-") {
			b++
		}
	}
	assert.InDelta(t, 4, b, 1, "acme/b had about half the places, not all of them: %v", order)
}

// The estimate is the run's budget.usd until the account has completed 5
// runs of the spec; then the 95th percentile of what the last 20 cost,
// when tighter. Runs of another spec, or that did not complete, teach
// nothing.
func TestAdmissionLearnsTheEstimate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 100}, "test")
	require.NoError(t, err)
	costs := []float64{0.10, 0.20, 0.30, 0.40, 0.50}
	for i, cost := range costs {
		id := fmt.Sprintf("learn-%d", i)
		adm := startQueued(ctx, t, store, admitReq(id, "acme/support", 2, 3))
		require.Equal(t, wire.AdmissionAdmitted, adm.Status)
		assert.InDelta(t, 2, adm.EstimateUSD, 1e-9, "%d runs completed: not enough to learn from", i)
		require.True(t, spendOn(ctx, t, store, id, "acme/support", 1, cost, cost/2))
		require.True(t, spendOn(ctx, t, store, id, "acme/support", 2, cost, cost/2))
		endRun(ctx, t, store, id, agentsagatype.RunCompleted)
	}
	// A partial run and another spec's teach nothing.
	other := startQueued(ctx, t, store, wire.AdmitRequest{RunID: "other", Account: "acme/support", SpecKey: "other", Priority: 3, BudgetUSD: 2})
	assert.InDelta(t, 2, other.EstimateUSD, 1e-9)
	require.True(t, spendOn(ctx, t, store, "other", "acme/support", 1, 1.5, 1.5))
	endRun(ctx, t, store, "other", agentsagatype.RunCompleted)
	startQueued(ctx, t, store, admitReq("partial", "acme/support", 2, 3))
	require.True(t, spendOn(ctx, t, store, "partial", "acme/support", 1, 1.9, 1.9))
	endRun(ctx, t, store, "partial", agentsagatype.RunPartial)

	learned := startQueued(ctx, t, store, admitReq("learned", "acme/support", 2, 3))
	assert.Equal(t, wire.AdmissionAdmitted, learned.Status)
	assert.InDelta(t, 0.48, learned.EstimateUSD, 1e-9, "the 95th percentile of 0.1 to 0.5")
	_, held := admissionStatus(ctx, t, store, "learned")
	assert.InDelta(t, 0.48, held, 1e-9, "admitting it reserved its estimate")
	tight := startQueued(ctx, t, store, admitReq("tight", "acme/support", 0.3, 3))
	assert.InDelta(t, 0.3, tight.EstimateUSD, 1e-9, "a budget tighter than what was learned bounds the estimate")
	unbudgeted := startQueued(ctx, t, store, admitReq("unbudgeted", "acme/support", 0, 3))
	assert.InDelta(t, 0.48, unbudgeted.EstimateUSD, 1e-9, "a run without budget.usd is estimated by what was learned")
	elsewhere := startQueued(ctx, t, store, admitReq("elsewhere", "acme/sales", 2, 3))
	assert.InDelta(t, 2, elsewhere.EstimateUSD, 1e-9, "another account learned nothing")
	for _, id := range []string{"learned", "tight", "unbudgeted", "elsewhere"} {
		endRun(ctx, t, store, id, agentsagatype.RunCompleted)
	}
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// A run estimated past what the cap can ever hold is admitted once the
// cap is empty, holding the cap's room, not waiting forever; the next
// waits behind it.
func TestAdmissionOfARunLargerThanTheCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1, FinishReserve: 0.2}, "test")
	require.NoError(t, err)
	big := startQueued(ctx, t, store, admitReq("big", "acme", 5, 3))
	assert.Equal(t, wire.AdmissionAdmitted, big.Status)
	_, held := admissionStatus(ctx, t, store, "big")
	assert.InDelta(t, 0.8, held, 1e-9, "it holds the cap's room, less the finishing reserve")
	next := startQueued(ctx, t, store, admitReq("next", "acme", 5, 3))
	assert.Equal(t, wire.AdmissionQueued, next.Status)
	// Its calls draw on its reservation, then on the cap, up to the room.
	assert.True(t, spendOn(ctx, t, store, "big", "acme", 1, 0.5, 0.5))
	assert.True(t, spendOn(ctx, t, store, "big", "acme", 2, 0.3, 0.3))
	assert.False(t, spendOn(ctx, t, store, "big", "acme", 3, 0.1, 0.1), "the cap's room is spent")
	endRun(ctx, t, store, "big", agentsagatype.RunPartial)
	n, err := store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	assert.Zero(t, n, "the month spent its room: next waits for the reset")
	require.NoError(t, store.CancelQueued(ctx, "next"))
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// Lowering a cap while runs wait keeps them waiting (and the runs
// admitted keep their reservations); raising it admits them at once.
func TestAdmissionLoweredCapKeepsRunsWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	cap := ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}
	_, err := store.SetSpendCap(ctx, cap, "test")
	require.NoError(t, err)
	assert.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("held", "acme", 0.6, 3)).Status)
	for _, id := range []string{"w1", "w2"} {
		assert.Equal(t, wire.AdmissionQueued, startQueued(ctx, t, store, admitReq(id, "acme", 0.5, 3)).Status)
	}
	cap.USD = 0.5
	_, err = store.SetSpendCap(ctx, cap, "test")
	require.NoError(t, err)
	n, err := store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	assert.Zero(t, n)
	status, held := admissionStatus(ctx, t, store, "held")
	assert.Equal(t, wire.AdmissionAdmitted, status)
	assert.InDelta(t, 0.6, held, 1e-9, "the run admitted keeps its reservation")
	for _, id := range []string{"w1", "w2"} {
		status, _ := admissionStatus(ctx, t, store, id)
		assert.Equal(t, wire.AdmissionQueued, status)
	}
	cap.USD = 1.7
	_, err = store.SetSpendCap(ctx, cap, "test")
	require.NoError(t, err)
	n, err = store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, 2, n, "a raised cap admits both")
	assert.Equal(t, []string{"held", "w1", "w2"}, admittedOrder(t, store))
	for _, id := range []string{"held", "w1", "w2"} {
		endRun(ctx, t, store, id, agentsagatype.RunCompleted)
	}
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

func moveClock(ctx context.Context, t *testing.T, store *ledgerdb.Store, period string) {
	ledgertest.MoveClock(ctx, t, store, period)
}

// A period reset admits the runs that waited for it, in order; a run
// still admitted across the reset keeps its reservation in the period it
// was made in until it ends.
func TestAdmissionAfterAPeriodReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}, "test")
	require.NoError(t, err)
	require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("spender", "acme", 0.5, 3)).Status)
	require.True(t, spendOn(ctx, t, store, "spender", "acme", 1, 0.5, 0.5))
	require.True(t, spendOn(ctx, t, store, "spender", "acme", 2, 0.3, 0.3))
	endRun(ctx, t, store, "spender", agentsagatype.RunCompleted)
	require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("across", "acme", 0.1, 3)).Status)
	for _, id := range []string{"q1", "q2", "q3"} {
		require.Equal(t, wire.AdmissionQueued, startQueued(ctx, t, store, admitReq(id, "acme", 0.4, 3)).Status)
	}
	n, err := store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	require.Zero(t, n)
	moveClock(ctx, t, store, ledgerdb.SpendMonth)
	assert.Zero(t, admissionViolations(ctx, t, store, false), "the moved clock keeps the books")
	n, err = store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, 2, n, "the new month holds two runs of $0.40 beside the $0.10 still held")
	assert.Equal(t, []string{"spender", "across", "q1", "q2"}, admittedOrder(t, store))
	require.True(t, spendOn(ctx, t, store, "across", "acme", 1, 0.05, 0.05))
	for _, id := range []string{"across", "q1", "q2"} {
		endRun(ctx, t, store, id, agentsagatype.RunCompleted)
	}
	n, err = store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	endRun(ctx, t, store, "q3", agentsagatype.RunCompleted)
	assert.Equal(t, []string{"spender", "across", "q1", "q2", "q3"}, admittedOrder(t, store))
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// CancelQueued takes a queued run out of the queue (its run ends without
// a turn); an admitted run, or one unknown, is not cancelled.
func TestAdmissionCancelQueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}, "test")
	require.NoError(t, err)
	require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("running", "acme", 0.8, 3)).Status)
	require.Equal(t, wire.AdmissionQueued, startQueued(ctx, t, store, admitReq("waiting", "acme", 0.8, 3)).Status)
	run, err := store.GetRun(ctx, "waiting")
	require.NoError(t, err)
	assert.Equal(t, "queued", run.Status, "the run shows queued")
	assert.Contains(t, run.StatusDetail, "spend cap for runs")
	require.NoError(t, store.CancelQueued(ctx, "waiting"))
	assert.ErrorIs(t, store.CancelQueued(ctx, "waiting"), ledgerdb.ErrNotQueued, "cancelled once")
	assert.ErrorIs(t, store.CancelQueued(ctx, "running"), ledgerdb.ErrNotQueued)
	assert.ErrorIs(t, store.CancelQueued(ctx, "nobody"), ledgerdb.ErrNotFound)
	adm, err := store.AdmitRun(ctx, admitReq("waiting", "acme", 0.8, 3))
	require.NoError(t, err)
	assert.Equal(t, wire.AdmissionCancelled, adm.Status, "the run asking again reads that it was cancelled")
	endRun(ctx, t, store, "waiting", agentsagatype.RunFailed)
	endRun(ctx, t, store, "running", agentsagatype.RunCompleted)
	n, err := store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	assert.Zero(t, n, "a cancelled run is never admitted")
	assert.Equal(t, []string{"running"}, admittedOrder(t, store))
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// A run whose lease passed (its deadline and a margin) holds nothing any
// more: the next pass gives its reservation back and admits what waited.
// Its later calls reserve on the caps, as before admission existed.
func TestAdmissionLeaseExpiryReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}, "test")
	require.NoError(t, err)
	req := admitReq("lost", "acme", 0.7, 3)
	req.LeaseMS = time.Hour.Milliseconds()
	require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, req).Status)
	require.Equal(t, wire.AdmissionQueued, startQueued(ctx, t, store, admitReq("next", "acme", 0.7, 3)).Status)
	n, err := store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	require.Zero(t, n, "the lease holds")
	// A moved clock: the lease passes now, however slow the machine is.
	_, err = store.Pool().Exec(ctx, `UPDATE run_admissions SET lease_until = clock_timestamp() - interval '1 second' WHERE run_id = 'lost'`)
	require.NoError(t, err)
	n, err = store.AdmitQueued(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the lease passed: next is admitted")
	status, held := admissionStatus(ctx, t, store, "lost")
	assert.Equal(t, wire.AdmissionEnded, status)
	assert.Zero(t, held)
	assert.Zero(t, admissionViolations(ctx, t, store, false))
	// lost's next call draws on nothing of its own: the cap has $0.30.
	assert.False(t, spendOn(ctx, t, store, "lost", "acme", 1, 0.4, 0.4))
	assert.True(t, spendOn(ctx, t, store, "lost", "acme", 2, 0.2, 0.2))
	endRun(ctx, t, store, "lost", agentsagatype.RunCompleted)
	endRun(ctx, t, store, "next", agentsagatype.RunCompleted)
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// A call's hold that expires (its worker died with the call in flight)
// is spent in full when the call reached the provider, its run's part
// included, and given back when it did not.
func TestAdmissionExpiredHoldsOfARun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}, "test")
	require.NoError(t, err)
	require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("crashy", "acme", 0.5, 3)).Status)
	claimed, unclaimed := "crashy/step-001-model", "crashy/step-002-model"
	for _, key := range []string{claimed, unclaimed} {
		r, err := store.ReserveSpend(ctx, key, "acme", 0.2, time.Minute)
		require.NoError(t, err)
		require.True(t, r.Admitted)
	}
	_, err = store.Pool().Exec(ctx, `INSERT INTO actions (idempotency_key, workflow_id, activity_id, tool, request_fingerprint, arguments, status, locked_until)
		VALUES ($1, 'crashy', 'a', 'model', 'f', '{}', 'started', clock_timestamp())`, claimed)
	require.NoError(t, err)
	// The worker died: the leases pass.
	_, err = store.Pool().Exec(ctx, `UPDATE spend_holds SET lease_until = clock_timestamp() - interval '1 second'`)
	require.NoError(t, err)
	full, released, err := store.ExpireSpendHolds(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, full)
	assert.Equal(t, 1, released)
	states, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, states, 1)
	assert.InDelta(t, 0.2, states[0].Spent, 1e-9, "the call that reached the provider is spent in full")
	_, held := admissionStatus(ctx, t, store, "crashy")
	assert.InDelta(t, 0.3, held, 1e-9, "the unclaimed call's part went back to its run")
	endRun(ctx, t, store, "crashy", agentsagatype.RunFailed)
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// kill -9 while admitting: a pass dies (its backend terminated, or its
// statement cancelled) after it admitted some runs and while it waits
// for another. Its transaction goes with it: nothing it did stays, and
// the next pass admits every run once, holding exactly what it admits.
func TestAdmissionPassKilledMidway(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"terminated", "cancelled"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store := ledgertest.NewStore(t)
			logAdmissions(t, store)
			_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}, "test")
			require.NoError(t, err)
			require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("big", "acme", 1, 3)).Status)
			for i := range 4 {
				require.Equal(t, wire.AdmissionQueued, startQueued(ctx, t, store, admitReq(fmt.Sprintf("k%d", i), "acme", 0.2, 3)).Status)
			}
			endRun(ctx, t, store, "big", agentsagatype.RunCompleted)
			// Another transaction holds k2's run row: the pass admits k0
			// and k1, then waits for it.
			blocker, err := store.Pool().Begin(ctx)
			require.NoError(t, err)
			defer blocker.Rollback(ctx)
			_, err = blocker.Exec(ctx, `SELECT 1 FROM runs WHERE workflow_id = 'k2' FOR UPDATE`)
			require.NoError(t, err)
			conn, err := pgx.ConnectConfig(ctx, store.Pool().Config().ConnConfig.Copy())
			require.NoError(t, err)
			defer conn.Close(ctx)
			var pid int
			require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			passCtx, cancelPass := context.WithCancel(ctx)
			defer cancelPass()
			done := make(chan error, 1)
			go func() {
				_, err := conn.Exec(passCtx, `SELECT agentsaga_admission_pass('acme')`)
				done <- err
			}()
			require.Eventually(t, func() bool {
				var waiting bool
				err := store.Pool().QueryRow(ctx, `SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
				return err == nil && waiting
			}, 10*time.Second, 10*time.Millisecond, "the pass waits for k2's row")
			if how == "terminated" {
				_, err = store.Pool().Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
			} else {
				cancelPass()
			}
			require.NoError(t, err)
			require.Error(t, <-done, "the pass died")
			require.NoError(t, blocker.Rollback(ctx))
			// The client that cancelled its statement is gone, but Postgres
			// may not know it yet: its backend can still finish the pass
			// (pgx closes the connection on a cancelled context; it sends
			// no cancel request), and commit it. Whichever it does, it
			// does whole, once.
			require.Eventually(t, func() bool {
				var alive bool
				err := store.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive)
				return err == nil && !alive
			}, 10*time.Second, 10*time.Millisecond, "the pass's backend ends")
			held, admitted, err := store.AdmissionHeld(ctx)
			require.NoError(t, err)
			if how == "terminated" {
				assert.Zero(t, admitted, "nothing the terminated pass admitted stays admitted")
				assert.Zero(t, held)
			} else {
				assert.Contains(t, []int{0, 4}, admitted, "the pass left by its client committed whole or not at all")
				assert.InDelta(t, 0.2*float64(admitted), held, 1e-9)
			}
			assert.Zero(t, admissionViolations(ctx, t, store, false))
			n, err := store.AdmitQueued(ctx, "acme")
			require.NoError(t, err)
			assert.Equal(t, 4, n+admitted, "every run is admitted, once")
			t.Logf("the dead pass left %d runs admitted; the next admitted %d", admitted, n)
			// A process that admitted runs and died before it told them:
			// they are left unsignalled for the next loop, and a run
			// asking again reads it is admitted, without a second
			// admission.
			ids, err := store.UnsignalledAdmissions(ctx, 10)
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{"k0", "k1", "k2", "k3"}, ids)
			for _, id := range ids {
				adm, err := store.AdmitRun(ctx, admitReq(id, "acme", 0.2, 3))
				require.NoError(t, err)
				assert.Equal(t, wire.AdmissionAdmitted, adm.Status)
			}
			ids, err = store.UnsignalledAdmissions(ctx, 10)
			require.NoError(t, err)
			assert.Empty(t, ids, "a run that asked knows")
			for i := range 4 {
				endRun(ctx, t, store, fmt.Sprintf("k%d", i), agentsagatype.RunCompleted)
			}
			assert.Equal(t, []string{"big", "k0", "k1", "k2", "k3"}, admittedOrder(t, store))
			violations := admissionViolations(ctx, t, store, true)
			t.Logf("violations=%d", violations)
			assert.Zero(t, violations)
		})
	}
}

// A run ended while a pass admits it (a queued run terminated, its
// workflow's end recorded) neither deadlocks with the pass nor leaves a
// reservation: ends and passes race over many runs.
func TestAdmissionRunsEndWhilePassesRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := openWorkers(t, 3, 3)
	store := stores[0]
	logAdmissions(t, store)
	require.NoError(t, store.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: "acme", MaxConcurrentRuns: 3}, "test"))
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 100}, "test")
	require.NoError(t, err)
	const runs = 60
	for i := range runs {
		startQueued(ctx, t, store, admitReq(fmt.Sprintf("e%02d", i), "acme/"+[]string{"a", "b"}[i%2], 0.5, 3))
	}
	var wg sync.WaitGroup
	passes := atomic.Int64{}
	stop := make(chan struct{})
	for _, s := range stores[1:] {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.AdmitQueued(ctx, "acme"); err != nil {
					t.Errorf("pass: %v", err)
					return
				}
				passes.Add(1)
			}
		})
	}
	// Every run ends, in a random order, whether it was admitted or not.
	order := rand.Perm(runs)
	var enders sync.WaitGroup
	for w := range 3 {
		enders.Go(func() {
			for j := w; j < runs; j += 3 {
				id := fmt.Sprintf("e%02d", order[j])
				if _, err := stores[w].Pool().Exec(ctx, `UPDATE runs SET status = 'terminated' WHERE workflow_id = $1`, id); err != nil {
					t.Errorf("end %s: %v", id, err)
				}
			}
		})
	}
	enders.Wait()
	close(stop)
	wg.Wait()
	violations := admissionViolations(ctx, t, store, true)
	var admitted int
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT count(*) FROM test_admissions`).Scan(&admitted))
	t.Logf("%d runs ended during %d passes, %d of them admitted first; violations=%d", runs, passes.Load(), admitted, violations)
	assert.Zero(t, violations)
}

// An admitted run's turns draw on its reservation first, so that another
// run's turns never stop it: not a finishing turn that fills the cap's
// finishing reserve, nor a cap lowered under what it holds. Past its
// reservation, a turn draws on the cap as before, and is refused there.
func TestAdmissionReservationIsTheRunsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	cap := ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1, FinishReserve: 0.5}
	_, err := store.SetSpendCap(ctx, cap, "test")
	require.NoError(t, err)
	require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("mine", "acme", 0.4, 3)).Status)
	// Another run, charged turn by turn (no admission), finishes into the
	// finishing reserve: the cap's room for turns is past.
	var admitted bool
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT admitted FROM agentsaga_spend_reserve('theirs/step-001-model', 'acme', 0.3, 60000, true)`).Scan(&admitted))
	require.True(t, admitted)
	_, err = store.SettleSpend(ctx, "theirs/step-001-model", 0.3)
	require.NoError(t, err)
	assert.True(t, spendOn(ctx, t, store, "mine", "acme", 1, 0.15, 0.15), "its reservation pays for its turn")
	cap.USD = 0.5
	_, err = store.SetSpendCap(ctx, cap, "test")
	require.NoError(t, err)
	assert.True(t, spendOn(ctx, t, store, "mine", "acme", 2, 0.2, 0.2), "a lowered cap does not take its reservation")
	assert.False(t, spendOn(ctx, t, store, "mine", "acme", 3, 0.1, 0.1), "past its reservation ($0.05 left), the cap binds")
	assert.True(t, spendOn(ctx, t, store, "mine", "acme", 4, 0.05, 0.05), "what is left of it is its own")
	endRun(ctx, t, store, "mine", agentsagatype.RunCompleted)
	cap.USD = 1
	_, err = store.SetSpendCap(ctx, cap, "test")
	require.NoError(t, err)
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}

// A tree whose caps differ in admit: acme's admits runs whole,
// acme/support's ($0.50 a month) shares out turns. A run of acme/support
// holds its reservation under acme's cap alone; its turns draw on it
// there (its own reservation, all of acme's room, does not stop them),
// and are reserved in full, turn by turn, under acme/support's, which
// refuses what it has no room for. Checked with a call in flight too.
func TestAdmissionUnderCapsThatShareOutTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	logAdmissions(t, store)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1}, "test")
	require.NoError(t, err)
	_, err = store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme/support", Period: ledgerdb.SpendMonth, USD: 0.5}, "test")
	require.NoError(t, err)
	_, err = store.Pool().Exec(ctx, `UPDATE spend_caps SET admit = 'turn' WHERE account = 'acme/support'`)
	require.NoError(t, err)
	require.Equal(t, wire.AdmissionAdmitted, startQueued(ctx, t, store, admitReq("mixed", "acme/support", 5, 3)).Status)
	status, held := admissionStatus(ctx, t, store, "mixed")
	require.Equal(t, wire.AdmissionAdmitted, status)
	assert.InDelta(t, 1, held, 1e-9, "held under acme's cap alone, all its room")
	assert.True(t, spendOn(ctx, t, store, "mixed", "acme/support", 1, 0.3, 0.2))
	r, err := store.ReserveSpend(ctx, "mixed/step-002-model", "acme/support", 0.25, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Admitted, "acme/support has $0.30 left")
	assert.Zero(t, admissionViolations(ctx, t, store, false), "a call in flight")
	assert.False(t, spendOn(ctx, t, store, "mixed", "acme/support", 3, 0.1, 0.1), "acme/support's cap has $0.05 left")
	_, err = store.SettleSpend(ctx, "mixed/step-002-model", 0.25)
	require.NoError(t, err)
	states, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	for _, st := range states {
		assert.InDelta(t, 0.45, st.Spent, 1e-9, "%s spent both calls", st.Account)
	}
	_, held = admissionStatus(ctx, t, store, "mixed")
	assert.InDelta(t, 0.55, held, 1e-9, "the run's reservation paid for both")
	endRun(ctx, t, store, "mixed", agentsagatype.RunCompleted)
	violations := admissionViolations(ctx, t, store, true)
	t.Logf("violations=%d", violations)
	assert.Zero(t, violations)
}
