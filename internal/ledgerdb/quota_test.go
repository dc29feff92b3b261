package ledgerdb_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/quota"
)

// The limits below are small and every bound is computed from the clock the
// database used (Admission.At, QuotaState.UpdatedAt), never from the
// test's own timing, so the tests hold on a loaded 2-core machine.

const quotaKey = "openai:gpt-4o-mini:0a1b2c3d4e5f"

// seconds is b - a in seconds.
func seconds(a, b time.Time) float64 { return b.Sub(a).Seconds() }

// Several pools (workers) and goroutines hammer one key until it refuses
// them: the requests and tokens admitted never exceed the bucket's capacity
// plus its refill between the declaration and the last admission.
func TestQuotaNeverOverAdmitsAcrossPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// 4 pools of 4 connections: 16 connections, 24 goroutines.
	const k, g, rpm, tpm = 4, 6, 120, 7000
	stores := openWorkers(t, k, 4)
	require.NoError(t, stores[0].EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{RequestsPerMinute: rpm, TokensPerMinute: tpm}))
	st, err := stores[0].QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	start := st.UpdatedAt // the declaration filled the buckets then

	var mu sync.Mutex
	var requests, tokens, denials int64
	var lastAdmit time.Time
	reasons := map[string]int{}
	deadline, last := time.Now().Add(1500*time.Millisecond), time.Now().Add(15*time.Second)
	errs := make(chan error, k*g)
	var wg sync.WaitGroup
	for w := range k {
		for i := range g {
			wg.Go(func() {
				for n := 0; ; n++ {
					now := time.Now()
					mu.Lock()
					done := !now.Before(last) || (!now.Before(deadline) && denials > 0)
					mu.Unlock()
					if done {
						return
					}
					tok := quota.Tokens{Input: int64(30 + (w*g+i+n)%61), Output: 20}
					a, err := stores[w].AdmitQuota(ctx, quotaKey, 1, tok, 0)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if a.Admitted {
						requests++
						tokens += tok.Total()
						if a.At.After(lastAdmit) {
							lastAdmit = a.At
						}
					} else {
						denials++
						reasons[a.Reason]++
						if !a.RetryAt.After(a.At) {
							errs <- assert.AnError
						}
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	elapsed := seconds(start, lastAdmit)
	t.Logf("admitted %d requests, %d tokens in %.3fs of the database's clock; %d denials %v", requests, tokens, elapsed, denials, reasons)
	require.Positive(t, denials, "the load ran the key dry")
	assert.LessOrEqual(t, float64(requests), rpm+rpm/60.0*elapsed+1e-6, "requests within the window")
	assert.LessOrEqual(t, float64(tokens), tpm+tpm/60.0*elapsed+1e-6, "tokens within the window")
	// The first denial came when a bucket could not pay for a call: all
	// but the last request, or all but the largest call's tokens, were
	// taken by then.
	assert.True(t, requests >= rpm-1 || tokens >= tpm-110, "the window was used: %d requests, %d tokens", requests, tokens)
	for reason := range reasons {
		assert.Contains(t, []string{ledgerdb.QuotaRequests, ledgerdb.QuotaTokens}, reason)
	}
}

// Settling gives back what a call reserved and did not use (and takes what
// it used beyond), and frees its concurrency slot.
func TestQuotaSettleGivesTokensBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const tpm, otpm = 6000.0, 3000.0
	require.NoError(t, store.EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{TokensPerMinute: tpm, OutputTokensPerMinute: otpm, Concurrency: 1}))

	reserved := quota.Tokens{Input: 1000, Output: 2000}
	a, err := store.AdmitQuota(ctx, quotaKey, 1, reserved, time.Minute)
	require.NoError(t, err)
	require.True(t, a.Admitted)
	st, err := store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.InDelta(t, 3000+tpm/60*seconds(a.At, st.At), st.Tokens, 1e-6, "3000 of 6000 reserved, then the refill")
	assert.Equal(t, 1, st.InFlight)
	assert.True(t, math.IsNaN(st.Requests), "requests are not limited")

	// The one slot is taken.
	b, err := store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{Input: 1}, time.Minute)
	require.NoError(t, err)
	assert.False(t, b.Admitted)
	assert.Equal(t, ledgerdb.QuotaConcurrency, b.Reason)

	require.NoError(t, store.SettleQuota(ctx, quotaKey, reserved, quota.Tokens{Input: 400, Output: 100}))
	st, err = store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	// 2500 came back: at least 5500 now, and no more than that plus the
	// refill since the admission.
	assert.GreaterOrEqual(t, st.Tokens, 5500-1e-6)
	assert.LessOrEqual(t, st.Tokens, math.Min(tpm, 5500+tpm/60*seconds(a.At, st.At))+1e-6)
	assert.GreaterOrEqual(t, st.OutputTokens, otpm-100-1e-6, "1900 of the 2000 output tokens came back")
	assert.Equal(t, 0, st.InFlight, "the slot is free")

	b, err = store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{Output: 1000}, time.Minute)
	require.NoError(t, err)
	require.True(t, b.Admitted, "the freed slot admits")
	// Used beyond the reservation: the excess is taken, a debt the refill pays.
	require.NoError(t, store.SettleQuota(ctx, quotaKey, quota.Tokens{Output: 1000}, quota.Tokens{Output: 3000 + 2000}))
	st, err = store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.LessOrEqual(t, st.OutputTokens, -2000+otpm/60*seconds(b.At, st.At)+1e-6, "a debt of 2000 tokens, less the refill")
	c, err := store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{Output: 1}, time.Minute)
	require.NoError(t, err)
	assert.False(t, c.Admitted)
	assert.Equal(t, ledgerdb.QuotaOutputTokens, c.Reason)
	// The output bucket held at most 2000 after b's admission, then -2000:
	// 2001 tokens to refill at 50 a second, less the refill since b.
	assert.GreaterOrEqual(t, seconds(c.At, c.RetryAt), 2001/(otpm/60)-seconds(b.At, c.At)-1e-3)

	assert.ErrorIs(t, store.SettleQuota(ctx, "nobody:nothing:000000000000", reserved, reserved), ledgerdb.ErrNotFound)
}

// A 429 seen by one worker closes the key for every worker until its time,
// and not a moment longer.
func TestQuotaCloseShutsEveryPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := openWorkers(t, 3, 2)
	require.NoError(t, stores[0].EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{RequestsPerMinute: 6000}))
	a, err := stores[1].AdmitQuota(ctx, quotaKey, 1, quota.Tokens{}, 0)
	require.NoError(t, err)
	require.True(t, a.Admitted)

	until, err := stores[0].CloseQuota(ctx, quotaKey, a.At.Add(1500*time.Millisecond))
	require.NoError(t, err)
	assert.WithinDuration(t, a.At.Add(1500*time.Millisecond), until, time.Microsecond)
	earlier, err := stores[2].CloseQuota(ctx, quotaKey, a.At.Add(time.Millisecond))
	require.NoError(t, err)
	assert.True(t, earlier.Equal(until), "an earlier close does not shorten the closure")

	var wg sync.WaitGroup
	admittedAt := make([]time.Time, len(stores))
	errs := make(chan error, len(stores))
	for i, store := range stores {
		wg.Go(func() {
			for stop := time.Now().Add(20 * time.Second); time.Now().Before(stop); {
				b, err := store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{Input: 10}, 0)
				if err != nil {
					errs <- err
					return
				}
				if b.Admitted {
					admittedAt[i] = b.At
					return
				}
				if b.Reason != ledgerdb.QuotaClosed || !b.RetryAt.Equal(until) || !b.At.Before(until) {
					t.Errorf("pool %d: refused %+v, want closed until %v", i, b, until)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i, at := range admittedAt {
		require.False(t, at.IsZero(), "pool %d was admitted after the closure", i)
		assert.False(t, at.Before(until), "pool %d admitted at %v, before %v", i, at, until)
	}
	st, err := stores[2].QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.True(t, st.ClosedUntil.Equal(until))
}

// What the provider's headers say corrects the declared limits: a learned
// limit applies unless the declared one is lower, and a remaining count
// lowers the level.
func TestQuotaLearnsFromHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{RequestsPerMinute: 100}))

	openai := http.Header{}
	openai.Set("x-ratelimit-limit-requests", "10")
	openai.Set("x-ratelimit-remaining-requests", "3")
	openai.Set("x-ratelimit-reset-requests", "6s")
	require.NoError(t, store.LearnQuota(ctx, quotaKey, quota.Parse(openai, time.Now())))
	st, err := store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.EqualValues(t, 10, st.RequestsPerMinute, "the provider's 10 replaces the declared 100")
	learnedAt := st.UpdatedAt

	admitted := 0
	var last ledgerdb.Admission
	for {
		a, err := store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{}, 0)
		require.NoError(t, err)
		if !a.Admitted {
			assert.Equal(t, ledgerdb.QuotaRequests, a.Reason)
			last = a
			break
		}
		admitted++
	}
	assert.GreaterOrEqual(t, admitted, 3)
	assert.LessOrEqual(t, float64(admitted), 3+10.0/60*seconds(learnedAt, last.At)+1e-6, "3 remaining, then the refill at 10 a minute")
	assert.LessOrEqual(t, last.RetryAt.Sub(last.At), 6*time.Second+time.Millisecond, "one request at 10 a minute")

	// The same news again writes nothing.
	st, err = store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	require.NoError(t, store.LearnQuota(ctx, quotaKey, quota.Parse(openai, time.Now())))
	again, err := store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.True(t, again.UpdatedAt.Equal(st.UpdatedAt), "a learn that changes nothing does not write the row")

	// Declared lower than learned: the declared limit holds.
	require.NoError(t, store.EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{RequestsPerMinute: 5}))
	st, err = store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.EqualValues(t, 5, st.RequestsPerMinute)
	openai.Set("x-ratelimit-limit-requests", "1000")
	openai.Set("x-ratelimit-remaining-requests", "999")
	require.NoError(t, store.LearnQuota(ctx, quotaKey, quota.Parse(openai, time.Now())))
	st, err = store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.EqualValues(t, 5, st.RequestsPerMinute, "a tier upgrade does not lift a limit declared on purpose")
	require.NoError(t, store.EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{}))
	st, err = store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.EqualValues(t, 1000, st.RequestsPerMinute, "undeclared, the learned limit holds")

	// Anthropic's input and output limits, on a key nobody declared: the
	// output side is spent, so a call waits for its output tokens' refill.
	const key = "anthropic:claude-sonnet-4-5:0a1b2c3d4e5f"
	anthropic := http.Header{}
	anthropic.Set("anthropic-ratelimit-input-tokens-limit", "40000")
	anthropic.Set("anthropic-ratelimit-input-tokens-remaining", "39000")
	anthropic.Set("anthropic-ratelimit-output-tokens-limit", "8000")
	anthropic.Set("anthropic-ratelimit-output-tokens-remaining", "0")
	anthropic.Set("anthropic-ratelimit-tokens-limit", "8000")
	require.NoError(t, store.LearnQuota(ctx, key, quota.Parse(anthropic, time.Now())))
	st, err = store.QuotaState(ctx, key)
	require.NoError(t, err)
	assert.EqualValues(t, 40000, st.InputTokensPerMinute)
	assert.EqualValues(t, 8000, st.OutputTokensPerMinute)
	assert.Zero(t, st.TokensPerMinute, "Anthropic's tokens-* headers are not a combined limit")
	spentAt := st.UpdatedAt
	a, err := store.AdmitQuota(ctx, key, 1, quota.Tokens{Input: 1000, Output: 4000}, 0)
	require.NoError(t, err)
	require.False(t, a.Admitted)
	assert.Equal(t, ledgerdb.QuotaOutputTokens, a.Reason)
	// 4000 output tokens at 8000 a minute take 30 s from empty; the bucket
	// has refilled since the headers emptied it.
	assert.InDelta(t, 30-seconds(spentAt, a.At), seconds(a.At, a.RetryAt), 1e-3)
	_, err = store.AdmitQuota(ctx, key, 1, quota.Tokens{Output: 8001}, 0)
	assert.ErrorIs(t, err, ledgerdb.ErrQuotaTooLarge)
	assert.ErrorContains(t, err, "too-large:output-tokens")
}

// Concurrency is counted fleet-wide, and a slot whose worker never settles
// comes back when its lease ends.
func TestQuotaConcurrencyAcrossPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stores := openWorkers(t, 3, 2)
	const limit = 3
	require.NoError(t, stores[0].EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{Concurrency: limit}))
	for i := range limit + 1 {
		a, err := stores[i%len(stores)].AdmitQuota(ctx, quotaKey, 1, quota.Tokens{}, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, i < limit, a.Admitted, "admission %d of a limit of %d", i+1, limit)
	}
	for i := range limit {
		require.NoError(t, stores[i%len(stores)].SettleQuota(ctx, quotaKey, quota.Tokens{}, quota.Tokens{}))
	}
	st, err := stores[0].QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	require.Equal(t, 0, st.InFlight)

	var inFlight, peak, admitted atomic.Int64
	errs := make(chan error, 12)
	var wg sync.WaitGroup
	stop := time.Now().Add(time.Second)
	for i := range 12 {
		store := stores[i%len(stores)]
		wg.Go(func() {
			for time.Now().Before(stop) {
				a, err := store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{Input: 5}, time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if !a.Admitted {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(3 * time.Millisecond)
				inFlight.Add(-1)
				if err := store.SettleQuota(ctx, quotaKey, quota.Tokens{Input: 5}, quota.Tokens{Input: 5}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("admitted %d, peak in flight %d", admitted.Load(), peak.Load())
	assert.Positive(t, admitted.Load())
	assert.LessOrEqual(t, peak.Load(), int64(limit))

	// A lost settle: the slot comes back when its lease ends.
	const key = "openai:gpt-4o:0a1b2c3d4e5f"
	require.NoError(t, stores[0].EnsureQuota(ctx, key, agentsagatype.RateLimit{Concurrency: 1}))
	first, err := stores[0].AdmitQuota(ctx, key, 1, quota.Tokens{}, 300*time.Millisecond)
	require.NoError(t, err)
	require.True(t, first.Admitted)
	for deadline := time.Now().Add(15 * time.Second); ; {
		require.True(t, time.Now().Before(deadline), "the lease never ended")
		a, err := stores[1].AdmitQuota(ctx, key, 1, quota.Tokens{}, 0)
		require.NoError(t, err)
		if a.Admitted {
			assert.False(t, a.At.Before(first.At.Add(300*time.Millisecond)), "admitted at %v, lease until %v", a.At, first.At.Add(300*time.Millisecond))
			break
		}
		assert.Equal(t, ledgerdb.QuotaConcurrency, a.Reason)
		assert.False(t, a.RetryAt.After(first.At.Add(300*time.Millisecond)), "retry no later than the lease's end")
		time.Sleep(50 * time.Millisecond)
	}
}

// Bad input gets an error naming what is wrong, before the database.
func TestQuotaBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	require.NoError(t, store.EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{RequestsPerMinute: 10}))
	before := ledgertest.Counts(t, store)

	_, err := store.AdmitQuota(ctx, "", 1, quota.Tokens{}, 0)
	assert.ErrorContains(t, err, "admit quota: the key is empty")
	_, err = store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{Input: -5}, 0)
	assert.ErrorContains(t, err, "admit quota "+quotaKey+": quota: input tokens -5 must not be negative")
	_, err = store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{Output: -1}, 0)
	assert.ErrorContains(t, err, "output tokens -1 must not be negative")
	_, err = store.AdmitQuota(ctx, quotaKey, -1, quota.Tokens{}, 0)
	assert.ErrorContains(t, err, "requests -1 must not be negative")
	_, err = store.AdmitQuota(ctx, quotaKey, 1, quota.Tokens{}, -time.Second)
	assert.ErrorContains(t, err, "lease -1s must not be negative")
	assert.ErrorContains(t, store.EnsureQuota(ctx, "", agentsagatype.RateLimit{}), "ensure quota: the key is empty")
	assert.ErrorContains(t, store.EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{RequestsPerMinute: -1}), "rate_limit.requests_per_minute: -1 is negative")
	assert.ErrorContains(t, store.SettleQuota(ctx, "", quota.Tokens{}, quota.Tokens{}), "settle quota: the key is empty")
	assert.ErrorContains(t, store.SettleQuota(ctx, quotaKey, quota.Tokens{Input: -1}, quota.Tokens{}), "reserved: quota: input tokens -1")
	assert.ErrorContains(t, store.SettleQuota(ctx, quotaKey, quota.Tokens{}, quota.Tokens{Output: -2}), "used: quota: output tokens -2")
	_, err = store.CloseQuota(ctx, "", time.Now())
	assert.ErrorContains(t, err, "close quota: the key is empty")
	_, err = store.CloseQuota(ctx, quotaKey, time.Time{})
	assert.ErrorContains(t, err, "the time to close until is zero")
	assert.ErrorContains(t, store.LearnQuota(ctx, "", quota.Observed{RequestsLimit: 1}), "learn quota: the key is empty")
	assert.ErrorContains(t, store.LearnQuota(ctx, quotaKey, quota.Observed{TokensLimit: -1}), "must not be negative")
	_, err = store.QuotaState(ctx, "nobody")
	assert.ErrorIs(t, err, ledgerdb.ErrNotFound)
	assert.Equal(t, before, ledgertest.Counts(t, store), "refused calls wrote nothing")

	// The SQL functions refuse the same values from a worker in any language.
	_, err = store.Pool().Exec(ctx, `SELECT agentsaga_quota_admit($1, 1, -1, 0, 1000)`, quotaKey)
	assert.ErrorContains(t, err, "must not be negative")
	_, err = store.Pool().Exec(ctx, `SELECT agentsaga_quota_admit('', 1, 1, 0, 1000)`)
	assert.ErrorContains(t, err, "the key is empty")
	_, err = store.Pool().Exec(ctx, `SELECT agentsaga_quota_settle($1, 0, 0, -1, 0)`, quotaKey)
	assert.ErrorContains(t, err, "must not be negative")
	_, err = store.Pool().Exec(ctx, `SELECT agentsaga_quota_ensure($1, -5, NULL, NULL, NULL, NULL)`, quotaKey)
	assert.ErrorContains(t, err, "declared_rpm")
}

// Hostile keys are data: every quota function round-trips them.
func TestQuotaHostileKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	tables := ledgertest.Tables(t, store)
	for _, key := range hostileText {
		require.NoError(t, store.EnsureQuota(ctx, key, agentsagatype.RateLimit{RequestsPerMinute: 2, Concurrency: 5}), key)
		a, err := store.AdmitQuota(ctx, key, 1, quota.Tokens{Input: 1}, 0)
		require.NoError(t, err, key)
		assert.True(t, a.Admitted, key)
		require.NoError(t, store.SettleQuota(ctx, key, quota.Tokens{Input: 1}, quota.Tokens{}), key)
		require.NoError(t, store.LearnQuota(ctx, key, quota.Observed{RequestsLimit: 1, RequestsRemaining: 0, RequestsRemainingKnown: true}), key)
		_, err = store.CloseQuota(ctx, key, a.At.Add(time.Hour))
		require.NoError(t, err, key)
		st, err := store.QuotaState(ctx, key)
		require.NoError(t, err, key)
		assert.EqualValues(t, 1, st.RequestsPerMinute, key)
		assert.True(t, st.ClosedUntil.Equal(a.At.Add(time.Hour)), key)
	}
	var n int
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT count(*) FROM quota_limits`).Scan(&n))
	assert.Equal(t, len(hostileText), n, "one row per key")
	assert.Equal(t, tables, ledgertest.Tables(t, store), "every table survived")
}

// A model turn on a quota is admitted by its claim: the turns that fit are
// claimed and sent; the next is refused with ErrQuotaWait and a release
// slot, claiming nothing and recording no leaf call; the calls refused
// after it get later slots, a request's refill apart; the settle gives
// unused tokens back, learns the headers and, after a 429, closes the key.
func TestClaimTurnAdmitsOnTheQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const rpm = 2 // a request refills in 30 s
	require.NoError(t, store.EnsureQuota(ctx, quotaKey, agentsagatype.RateLimit{RequestsPerMinute: rpm, TokensPerMinute: 100000}))
	turn := func(i int) (ledgerdb.ActionRequest, ledgerdb.LeafCall, ledgerdb.TurnRead) {
		wf := fmt.Sprintf("wf-quota-%d", i)
		return ledgerdb.ActionRequest{Key: wf + "/step-001-model", WorkflowID: wf, ActivityID: "step-001-model",
				Tool: "model:openai:gpt-4o-mini", Arguments: `{"through":1}`, Kind: ledgerdb.ActionModel},
			ledgerdb.LeafCall{Attempt: 1, Kind: ledgerdb.LeafModel, Target: "openai:gpt-4o-mini"},
			ledgerdb.TurnRead{WorkflowID: wf, Through: 1, Append: []ledgerdb.Message{{Seq: 0, Role: "user", Content: "hello", Tokens: 100}},
				Fit: ledgerdb.FitRequest{Trailing: 20}, Quota: &ledgerdb.QuotaClaim{Key: quotaKey, Output: 500}}
	}

	var claims []ledgerdb.Claim
	for i := range rpm {
		req, leaf, read := turn(i)
		claim, err := store.ClaimTurn(ctx, req, leaf, time.Minute, read)
		require.NoError(t, err, i)
		require.True(t, claim.Execute, i)
		assert.True(t, claim.Quota.Admitted)
		assert.Equal(t, quota.Tokens{Input: 120, Output: 500}, claim.Quota.Reserved, "the conversation, what follows it, and max_tokens")
		claims = append(claims, claim)
	}
	var slots []time.Time
	for i := rpm; i < rpm+3; i++ {
		req, leaf, read := turn(i)
		claim, err := store.ClaimTurn(ctx, req, leaf, time.Minute, read)
		require.ErrorIs(t, err, ledgerdb.ErrQuotaWait, i)
		assert.False(t, claim.Execute)
		assert.Equal(t, ledgerdb.QuotaRequests, claim.Quota.Reason)
		slots = append(slots, claim.Quota.RetryAt)
		assert.Empty(t, leafCalls(t, store, req.WorkflowID), "a refused turn sends nothing")
		_, err = store.GetAction(ctx, req.Key)
		assert.ErrorIs(t, err, ledgerdb.ErrNotFound, "a refused turn claims nothing")
	}
	for i := 1; i < len(slots); i++ {
		// 30 s apart, plus up to 15 s of jitter on each.
		gap := slots[i].Sub(slots[i-1]).Seconds()
		assert.InDelta(t, 30, gap, 15.01, "slot %d", i)
	}
	st, err := store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.EqualValues(t, 3, st.Refused)
	assert.Equal(t, 3, st.Waiting)
	assert.Greater(t, st.WaitedSeconds, 3*25.0)

	// The first turn used less than it reserved, and the provider said so.
	req, _, _ := turn(0)
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", "90000")
	_, err = store.SettleAttempt(ctx, req.Key, claims[0].Action.Attempts, ledgerdb.AttemptEnd{Status: agentsagatype.ActionCompleted,
		Result: `{"content":"hi"}`, LeafCallID: claims[0].LeafCallID,
		Quota: &ledgerdb.QuotaAnswer{Admission: claims[0].Quota, Used: quota.Tokens{Input: 110, Output: 10}, Observed: quota.Parse(h, time.Now())}})
	require.NoError(t, err)
	st, err = store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.InDelta(t, 90000, st.TokensPerMinute, 0.001, "learned from the headers")
	assert.LessOrEqual(t, st.Tokens, 90000.0, "the level is capped at the learned limit")

	// The second got a 429: the key closes for everyone.
	req, _, _ = turn(1)
	until := time.Now().Add(time.Hour)
	_, err = store.SettleAttempt(ctx, req.Key, claims[1].Action.Attempts, ledgerdb.AttemptEnd{Status: agentsagatype.ActionFailed,
		Cause: "HTTP 429", ErrorType: "RateLimited", LeafCallID: claims[1].LeafCallID, CallErr: errors.New("HTTP 429"),
		Quota: &ledgerdb.QuotaAnswer{Admission: claims[1].Quota, ClosedUntil: until}})
	require.NoError(t, err)
	st, err = store.QuotaState(ctx, quotaKey)
	require.NoError(t, err)
	assert.EqualValues(t, 1, st.RateLimited)
	assert.WithinDuration(t, until, st.ClosedUntil, time.Millisecond)
	req, leaf, read := turn(9)
	claim, err := store.ClaimTurn(ctx, req, leaf, time.Minute, read)
	require.ErrorIs(t, err, ledgerdb.ErrQuotaWait)
	assert.Equal(t, ledgerdb.QuotaClosed, claim.Quota.Reason)
	assert.False(t, claim.Quota.RetryAt.Before(until), "nobody goes out before the 429's reset")

	// A stored turn is handed back without asking the quota.
	req, leaf, read = turn(0)
	replay, err := store.ClaimTurn(ctx, req, leaf, time.Minute, read)
	require.NoError(t, err)
	assert.False(t, replay.Execute)
	assert.False(t, replay.Quota.Admitted)
}
