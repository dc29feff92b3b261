package ledgerdb_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/convfit"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// Many pools reserve against one account tree at once (a parent's $5 a
// day, a child's $3), each call settling to a part of what it reserved.
// After every call has ended: what each cap's period spent never passes
// the cap, nothing stays reserved, and the spend is exactly the sum of
// what the calls settled. The violations are counted, and must be 0.
// Pools of their own are separate connections, as processes would be.
func TestSpendCapsHoldAcrossPools(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const pools, goroutines, calls = 4, 6, 25
	stores := openWorkers(t, pools, 4)
	caps := []ledgerdb.SpendCap{
		{Account: "acme", Period: ledgerdb.SpendDay, USD: 5},
		{Account: "acme/support", Period: ledgerdb.SpendDay, TimeZone: "Europe/Paris", USD: 3, OnExhausted: agentsagatype.OnExhaustedWait},
	}
	for _, c := range caps {
		_, err := stores[0].SetSpendCap(ctx, c, "test")
		require.NoError(t, err)
	}

	var mu sync.Mutex
	settled := map[string]float64{}
	refusals := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, pools*goroutines)
	for p := range pools {
		for g := range goroutines {
			wg.Go(func() {
				account := []string{"acme/support", "acme/sales"}[g%2]
				for n := range calls {
					key := fmt.Sprintf("wf-%d-%d/step-%03d-model", p, g, n)
					usd := 0.05 + rand.Float64()*0.25
					r, err := stores[p].ReserveSpend(ctx, key, account, usd, time.Minute)
					if err != nil {
						errs <- err
						return
					}
					if !r.Admitted {
						mu.Lock()
						refusals[r.Cap.Account]++
						mu.Unlock()
						continue
					}
					cost := usd * (0.3 + 0.7*rand.Float64())
					if _, err := stores[p].SettleSpend(ctx, key, cost); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					settled[account] += cost
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

	states, err := stores[0].SpendCaps(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, states, 2)
	want := map[string]float64{"acme": settled["acme/support"] + settled["acme/sales"], "acme/support": settled["acme/support"]}
	violations := 0
	for _, st := range states {
		if st.Spent > st.USD+1e-9 {
			violations++
		}
		if st.Reserved > 1e-9 || st.Reserved < -1e-9 {
			violations++
		}
		assert.InDelta(t, want[st.Account], st.Spent, 1e-6, "what %s spent is what its calls settled", st.Account)
		t.Logf("%s: cap $%.2f a %s, spent $%.4f (%.1f%%), reserved $%.4f", st.Account, st.USD, st.Period, st.Spent, 100*st.Spent/st.USD, st.Reserved)
	}
	t.Logf("%d pools x %d goroutines x %d calls; refusals by cap %v; violations %d", pools, goroutines, calls, refusals, violations)
	assert.Zero(t, violations, "caps passed or reservations left held")
	assert.Positive(t, refusals["acme"]+refusals["acme/support"], "the caps bound")
}

// A parent's cap binds before its child's: acme/support has room, acme
// has not, and the refusal names acme, its cap and when it resets.
func TestAParentCapBindsBeforeTheChilds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendMonth, USD: 1, OnExhausted: agentsagatype.OnExhaustedEscalate}, "ops")
	require.NoError(t, err)
	_, err = store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme/support", Period: ledgerdb.SpendDay, USD: 5}, "ops")
	require.NoError(t, err)

	r, err := store.ReserveSpend(ctx, "wf/a", "acme/support", 0.8, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Admitted)
	r, err = store.ReserveSpend(ctx, "wf/b", "acme/support", 0.3, time.Minute)
	require.NoError(t, err)
	require.False(t, r.Admitted)
	assert.Equal(t, "acme", r.Cap.Account)
	assert.Equal(t, ledgerdb.SpendMonth, r.Cap.Period)
	assert.Equal(t, agentsagatype.OnExhaustedEscalate, r.Cap.OnExhausted)
	assert.InDelta(t, 0.8, r.Reserved, 1e-9)
	now := time.Now().UTC()
	assert.Equal(t, time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC), r.Resets.UTC())
	assert.Contains(t, r.Refusal(0.3).Reason(), "the spend cap of account acme ($1.00 a month) has $0.00 spent and $0.80 reserved, and the next turn needs up to $0.3000; it resets at")

	// An account outside the tree is not charged to it; a key that holds
	// is admitted again without holding twice.
	r, err = store.ReserveSpend(ctx, "wf/c", "acmeco", 100, time.Minute)
	require.NoError(t, err)
	assert.True(t, r.Admitted, "acmeco is not under acme")
	r, err = store.ReserveSpend(ctx, "wf/a", "acme/support", 0.8, time.Minute)
	require.NoError(t, err)
	assert.True(t, r.Admitted, "the same key again")
	states, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	assert.InDelta(t, 0.8, states[0].Reserved, 1e-9, "held once")

	held, err := store.SettleSpend(ctx, "wf/a", 0.5)
	require.NoError(t, err)
	assert.True(t, held)
	held, err = store.SettleSpend(ctx, "wf/a", 0.5)
	require.NoError(t, err)
	assert.False(t, held, "settled once")
	states, err = store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	assert.InDelta(t, 0.5, states[0].Spent, 1e-9)
	assert.InDelta(t, 0.5, states[0].Left(), 1e-9)
}

// Periods are calendar-aligned in the cap's time zone: a Paris day is 23
// hours when the clocks go forward and 25 when they go back, months end
// on their last day (February too, in a leap year), and hours are hours.
func TestSpendPeriodsFollowTheCalendar(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for _, tc := range []struct {
		period, zone   string
		at             time.Time
		starts, resets time.Time
		length         time.Duration
	}{
		{ledgerdb.SpendDay, "Europe/Paris", time.Date(2026, 3, 29, 12, 0, 0, 0, paris),
			time.Date(2026, 3, 29, 0, 0, 0, 0, paris), time.Date(2026, 3, 30, 0, 0, 0, 0, paris), 23 * time.Hour},
		{ledgerdb.SpendDay, "Europe/Paris", time.Date(2026, 10, 25, 23, 59, 0, 0, paris),
			time.Date(2026, 10, 25, 0, 0, 0, 0, paris), time.Date(2026, 10, 26, 0, 0, 0, 0, paris), 25 * time.Hour},
		{ledgerdb.SpendDay, "UTC", time.Date(2026, 12, 3, 23, 30, 0, 0, paris), // 22:30 UTC
			time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), 24 * time.Hour},
		{ledgerdb.SpendMonth, "UTC", time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC),
			time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), 31 * 24 * time.Hour},
		{ledgerdb.SpendMonth, "UTC", time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC),
			time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 29 * 24 * time.Hour},
		{ledgerdb.SpendMonth, "Europe/Paris", time.Date(2026, 3, 15, 0, 0, 0, 0, paris), // March has the spring change
			time.Date(2026, 3, 1, 0, 0, 0, 0, paris), time.Date(2026, 4, 1, 0, 0, 0, 0, paris), 31*24*time.Hour - time.Hour},
		{ledgerdb.SpendHour, "Asia/Kolkata", time.Date(2026, 12, 3, 10, 45, 0, 0, time.UTC), // +05:30: 16:15 local
			time.Date(2026, 12, 3, 10, 30, 0, 0, time.UTC), time.Date(2026, 12, 3, 11, 30, 0, 0, time.UTC), time.Hour},
	} {
		starts, resets, err := store.SpendPeriod(ctx, tc.period, tc.zone, tc.at)
		require.NoError(t, err)
		assert.True(t, tc.starts.Equal(starts), "%s in %s at %s: starts %s, want %s", tc.period, tc.zone, tc.at, starts, tc.starts)
		assert.True(t, tc.resets.Equal(resets), "%s in %s at %s: resets %s, want %s", tc.period, tc.zone, tc.at, resets, tc.resets)
		assert.Equal(t, tc.length, resets.Sub(starts), "%s in %s at %s", tc.period, tc.zone, tc.at)
	}
}

// A hold whose call never settles (its worker was killed) is never left
// held once its lease has passed: spent in full when the call reached the
// ledger (the provider may have charged it), released when it never did.
func TestExpiredHoldsAreSpentOrReleasedNeverLeftHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendDay, USD: 10}, "ops")
	require.NoError(t, err)
	claimed := request("step-001-model")
	_, err = store.ClaimCall(ctx, claimed, leafOf(claimed, 1), time.Minute)
	require.NoError(t, err)
	for key, usd := range map[string]float64{claimed.Key: 0.7, "wf-1/step-002-model": 0.4} {
		r, err := store.ReserveSpend(ctx, key, "acme", usd, time.Second)
		require.NoError(t, err)
		require.True(t, r.Admitted)
	}
	time.Sleep(1200 * time.Millisecond)
	// (Under load the second reservation may have ended the first hold
	// already: what matters is the state they leave.)
	spent, released, err := store.ExpireSpendHolds(ctx)
	require.NoError(t, err)
	assert.LessOrEqual(t, spent, 1, "the claimed call, spent in full")
	assert.Equal(t, 1, released, "the call that never reached the ledger")
	states, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	assert.InDelta(t, 0.7, states[0].Spent, 1e-9)
	assert.InDelta(t, 0, states[0].Reserved, 1e-9, "nothing left held")
	spent, released, err = store.ExpireSpendHolds(ctx)
	require.NoError(t, err)
	assert.Zero(t, spent+released, "each hold ends once")
}

// A hold lives as long as its call's attempt does: each renewal of the
// key's lease (the attempt's heartbeat) extends it, so a turn slower than
// its first lease is not spent in full while it still runs.
func TestAHoldLivesAsLongAsItsAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendDay, USD: 10}, "ops")
	require.NoError(t, err)
	slow := request("step-001-model")
	claim, err := store.ClaimCall(ctx, slow, leafOf(slow, 1), time.Minute)
	require.NoError(t, err)
	r, err := store.ReserveSpend(ctx, slow.Key, "acme", 0.7, time.Second)
	require.NoError(t, err)
	require.True(t, r.Admitted)
	require.NoError(t, store.RenewLease(ctx, slow.Key, claim.Action.Attempts, time.Minute))
	time.Sleep(1200 * time.Millisecond) // the hold's first lease has passed
	spent, released, err := store.ExpireSpendHolds(ctx)
	require.NoError(t, err)
	assert.Zero(t, spent+released, "the attempt renewed its lease: its hold lives")
	held, err := store.SettleSpend(ctx, slow.Key, 0.2)
	require.NoError(t, err)
	assert.True(t, held, "the turn settles its own reservation")
	states, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	assert.InDelta(t, 0.2, states[0].Spent, 1e-9, "what the turn cost, not its reservation")
}

// Every change to a cap is kept, with who made it, and a cap that makes
// no sense is refused with what is wrong, changing nothing.
func TestSpendCapChangesAreKeptAndBadCapsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	old, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendDay, USD: 50}, "ann")
	require.NoError(t, err)
	assert.Nil(t, old)
	old, err = store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendDay, USD: 80, OnExhausted: agentsagatype.OnExhaustedWait}, "bob")
	require.NoError(t, err)
	require.NotNil(t, old)
	assert.Equal(t, 50.0, old.USD)
	_, err = store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendDay, USD: 80, OnExhausted: agentsagatype.OnExhaustedWait}, "bob")
	require.NoError(t, err)
	removed, err := store.RemoveSpendCap(ctx, "acme", ledgerdb.SpendDay, "cy")
	require.NoError(t, err)
	require.NotNil(t, removed)
	assert.Equal(t, 80.0, removed.USD)

	changes, err := store.SpendCapChanges(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, changes, 3, "set, raised, removed (setting the same cap again is no change)")
	assert.Equal(t, "ann", changes[0].By)
	assert.Nil(t, changes[0].Old)
	assert.Equal(t, "bob", changes[1].By)
	assert.Equal(t, 50.0, changes[1].Old.USD)
	assert.Equal(t, agentsagatype.OnExhaustedWait, changes[1].New.OnExhausted)
	assert.Equal(t, "cy", changes[2].By)
	assert.Nil(t, changes[2].New)

	for cap, want := range map[ledgerdb.SpendCap]string{
		{Account: "", Period: ledgerdb.SpendDay, USD: 1}:                               "account: empty",
		{Account: "acme//x", Period: ledgerdb.SpendDay, USD: 1}:                        "not empty or padded",
		{Account: "acme", Period: "week", USD: 1}:                                      `period "week" is not minute, hour, day, month or a rolling window`,
		{Account: "acme", Period: "rolling 1h30m", USD: 1}:                             `rolling window "1h30m" is not a whole number of hours, minutes or seconds`,
		{Account: "acme", Period: "rolling 0s", USD: 1}:                                `rolling window "0s"`,
		{Account: "acme", Period: "rolling 800h", USD: 1}:                              `rolling window "800h"`,
		{Account: "acme", Period: ledgerdb.SpendDay, USD: -1}:                          "usd -1",
		{Account: "acme", Period: ledgerdb.SpendDay, USD: 1, TimeZone: "Mars/Olympus"}: `time zone "Mars/Olympus"`,
		{Account: "acme", Period: ledgerdb.SpendDay, USD: 1, OnExhausted: "shrug"}:     `on_exhausted "shrug"`,
	} {
		_, err := store.SetSpendCap(ctx, cap, "ann")
		require.ErrorContains(t, err, want)
	}
	states, err := store.SpendCaps(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, states, "nothing was set")
}

// A hold whose worker died does not keep the cap's room past its lease:
// the next reservation ends it first, with no sweeper running.
func TestTheNextReservationEndsAnExpiredHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	_, err := store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: "acme", Period: ledgerdb.SpendDay, USD: 1}, "ops")
	require.NoError(t, err)
	r, err := store.ReserveSpend(ctx, "wf-dead/step-001-model", "acme", 0.9, time.Second)
	require.NoError(t, err)
	require.True(t, r.Admitted)
	r, err = store.ReserveSpend(ctx, "wf-live/step-001-model", "acme", 0.5, time.Minute)
	require.NoError(t, err)
	require.False(t, r.Admitted, "the hold is live: no room")
	time.Sleep(1200 * time.Millisecond)
	r, err = store.ReserveSpend(ctx, "wf-live/step-001-model", "acme", 0.5, time.Minute)
	require.NoError(t, err)
	assert.True(t, r.Admitted, "the dead worker's hold was released (its call never reached the ledger)")
	states, err := store.SpendCaps(ctx, "acme")
	require.NoError(t, err)
	assert.InDelta(t, 0.5, states[0].Reserved, 1e-9)
	assert.Zero(t, states[0].Spent)
}

// A spend cap that Validate accepts is one the ledger stores and reads
// back as it was; one it refuses never reaches the ledger. Validate never
// panics.
func FuzzSpendCap(f *testing.F) {
	for _, seed := range []struct {
		account, period, zone, onExhausted string
		usd                                float64
	}{
		{"acme", "day", "", "", 50},
		{"acme/support", "month", "Europe/Paris", "escalate", 2000},
		{"a_b%c/d", "minute", "UTC", "wait", 0.01},
		{"acme//x", "day", "", "", 1},
		{" acme", "hour", "", "", 1},
		{"acme\x00", "day", "", "", 1},
		{"acme\xff", "day", "", "", 1},
		{"acme", "week", "", "", 1},
		{"acme", "day", "Mars/Olympus", "", 1},
		{"acme", "day", "", "shrug", 1},
		{"acme", "day", "", "", -1},
		{"acme", "day", "", "", 1e300},
		{"acme", "rolling 24h", "", "wait", 50},
		{"acme", "rolling 61s", "", "", 1},
		{"acme", "rolling 90m", "Europe/Paris", "", 1},
		{"acme", "rolling 1h30m", "", "", 1},
		{"acme", "rolling -1h", "", "", 1},
		{"acme", "rolling 24H", "", "", 1},
	} {
		f.Add(seed.account, seed.period, seed.zone, seed.onExhausted, seed.usd)
	}
	store := ledgertest.NewStore(f)
	f.Fuzz(func(t *testing.T, account, period, zone, onExhausted string, usd float64) {
		c := ledgerdb.SpendCap{Account: account, Period: period, TimeZone: zone, OnExhausted: onExhausted, USD: usd}
		ctx := context.Background()
		if err := c.Validate(); err != nil {
			_, setErr := store.SetSpendCap(ctx, c, "fuzz")
			require.ErrorContains(t, setErr, err.Error(), "refused by Validate, refused by the ledger with the same reason")
			return
		}
		_, err := store.SetSpendCap(ctx, c, "fuzz")
		require.NoError(t, err, "%+v", c)
		caps, err := store.SpendCaps(ctx, account)
		require.NoError(t, err)
		var found bool
		for _, got := range caps {
			if got.Account == account && got.Period == period {
				found = true
				require.InEpsilon(t, max(usd, 1e-300), max(got.USD, 1e-300), 1e-9, "the cap reads back as it was set")
			}
		}
		require.True(t, found, "%+v was set and is listed", c)
		_, err = store.RemoveSpendCap(ctx, account, period, "fuzz")
		require.NoError(t, err)
	})
}

// A turn's reservation is an upper bound of what the provider bills for
// its prompt: the claim prices the conversation by the estimates the
// activity writes (the o200k count plus a fifth, plus framing), and the
// provider counts the same text with o200k plus its chat framing (3
// tokens a message, 3 to prime the reply, as OpenAI documents for the
// gpt-4o family). Checked over prose, code, JSON, CJK, emoji, repeated
// words and tool calls. (Other providers' tokenizers differ; the fifth is
// the margin for them, which no loopback server can check.)
func TestATurnsReservationBoundsWhatTheProviderCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	const price, maxTokens = 1000.0, 40
	texts := map[string]string{
		"prose": "The refund for order A-1042 was approved by the support lead after the customer sent the receipt.",
		"code":  "func main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Println(i * i)\n\t}\n}\n",
		"json":  `{"order":"A-1042","items":[{"sku":"X-1","qty":2,"price":19.99},{"sku":"Y-7","qty":1,"price":5}],"status":"shipped"}`,
		"cjk":   "注文番号A-1042の返金は、領収書を受け取った後にサポート責任者によって承認されました。",
		"emoji": "🚚📦✅ shipped 🎉🎉🎉 " + strings.Repeat("👍🏽", 20),
		"words": strings.Repeat("refund ", 300),
	}
	low, high := math.Inf(1), 0.0
	n := 0
	for name, text := range texts {
		n++
		wf := "wf-bound-" + name
		msgs := []agentsagatype.Message{
			{Seq: 0, Role: "system", Content: "You are a careful support agent.", Pinned: true},
			{Seq: 1, Role: "user", Content: text, Pinned: true},
			{Seq: 2, Role: "assistant", ToolCalls: []agentsagatype.ToolCall{{ID: "call_1", Name: "lookup", Arguments: `{"order":"A-1042"}`}}},
			{Seq: 3, Role: "tool", ToolCallID: "call_1", Name: "lookup", Content: text},
		}
		appended := make([]ledgerdb.Message, len(msgs))
		billed := 3 // the reply's priming
		for i, m := range msgs {
			appended[i] = convfit.ToLedger(m)
			billed += 3 + convfit.Count(m.Content)
			for _, c := range m.ToolCalls {
				billed += convfit.Count(c.Name) + convfit.Count(c.Arguments) + 3
			}
		}
		claim, err := store.ClaimTurn(ctx, ledgerdb.ActionRequest{Key: wf + "/step-001-model", WorkflowID: wf, ActivityID: "step-001-model",
			Tool: "model:openai:gpt-4o-mini", Arguments: `{"through":4}`, Kind: ledgerdb.ActionModel},
			ledgerdb.LeafCall{Attempt: 1, Kind: ledgerdb.LeafModel, Target: "openai:gpt-4o-mini"},
			time.Minute, ledgerdb.TurnRead{WorkflowID: wf, Through: len(msgs), Append: appended,
				Spend: &ledgerdb.SpendClaim{Account: "acme", InputUSDPerMillion: price, OutputUSDPerMillion: price, OutputTokens: maxTokens}})
		require.NoError(t, err, name)
		require.True(t, claim.Execute, name)
		bill := float64(billed+maxTokens) * price / 1e6
		assert.GreaterOrEqual(t, claim.SpendUSD, bill, "%s: reserved $%.6f, the provider's count costs up to $%.6f", name, claim.SpendUSD, bill)
		ratio := claim.SpendUSD / bill
		low, high = min(low, ratio), max(high, ratio)
	}
	t.Logf("%d conversations: the reservation is %.2fx to %.2fx the most the provider's count can bill", n, low, high)
}

// The spend report attributes what settled calls cost by account, model
// and day; a key settled twice (a failed attempt gave its reservation
// back, the next answered) is one call.
func TestSpendReportAttributesByAccountModelAndDay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := ledgertest.NewStore(t)
	since := time.Now().Add(-time.Minute)
	for _, c := range []struct {
		key, account, model string
		costs               []float64
	}{
		{"wf-a/step-001-model", "acme/support", "openai:gpt-4o-mini", []float64{0, 0.3}},
		{"wf-a/step-002-model", "acme/support", "openai:gpt-4o-mini", []float64{0.2}},
		{"wf-b/step-001-model", "acme/sales", "anthropic:claude-sonnet-4-5", []float64{1.5}},
	} {
		req := ledgerdb.ActionRequest{Key: c.key, WorkflowID: c.key[:4], ActivityID: c.key[5:], Tool: "model:" + c.model, Arguments: "{}", Kind: ledgerdb.ActionModel}
		_, err := store.ClaimCall(ctx, req, ledgerdb.LeafCall{Attempt: 1, Kind: ledgerdb.LeafModel, Target: c.model}, time.Minute)
		require.NoError(t, err)
		for _, usd := range c.costs {
			r, err := store.ReserveSpend(ctx, c.key, c.account, 2, time.Minute)
			require.NoError(t, err)
			require.True(t, r.Admitted)
			held, err := store.SettleSpend(ctx, c.key, usd)
			require.NoError(t, err)
			require.True(t, held)
		}
		// The reply, as a model turn stores it; its text quotes a usage
		// that is not its own.
		reply := `{"content":"the docs say \"input_tokens\":99","usage":{"input_tokens":1000,"output_tokens":10,"cached_input_tokens":600,"cache_write_tokens":300}}`
		_, err = store.CompleteAction(ctx, c.key, 1, reply)
		require.NoError(t, err)
	}
	byAccount, err := store.SpendReport(ctx, since, []string{ledgerdb.SpendByAccount})
	require.NoError(t, err)
	require.Len(t, byAccount, 2)
	assert.Equal(t, "acme/sales", byAccount[0].Account, "the largest first")
	assert.InDelta(t, 1.5, byAccount[0].USD, 1e-9)
	assert.Equal(t, "acme/support", byAccount[1].Account)
	assert.InDelta(t, 0.5, byAccount[1].USD, 1e-9)
	assert.EqualValues(t, 2, byAccount[1].Calls, "a key settled twice is one call")
	assert.EqualValues(t, 2000, byAccount[1].InputTokens, "the turns' usage, read from their replies")
	assert.EqualValues(t, 1200, byAccount[1].CachedTokens)
	assert.EqualValues(t, 600, byAccount[1].CacheWriteTokens)
	all, err := store.SpendReport(ctx, since, []string{ledgerdb.SpendByAccount, ledgerdb.SpendByModel, ledgerdb.SpendByDay})
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, "anthropic:claude-sonnet-4-5", all[0].Model)
	assert.Equal(t, time.Now().UTC().Truncate(24*time.Hour), all[0].Day.UTC())
	total, err := store.SpendReport(ctx, since, nil)
	require.NoError(t, err)
	require.Len(t, total, 1)
	assert.InDelta(t, 2.0, total[0].USD, 1e-9)
	_, err = store.SpendReport(ctx, since, []string{"week"})
	require.ErrorContains(t, err, `"week" is not account, model or day`)
}
