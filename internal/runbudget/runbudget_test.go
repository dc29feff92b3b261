package runbudget_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/runbudget"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestNewRunBudgetValidates(t *testing.T) {
	for name, tc := range map[string]struct {
		limits   budget.Limits
		finishAt float64
		wantErr  string
	}{
		"no steps":       {budget.Limits{}, 0.2, "budget.steps"},
		"negative usd":   {budget.Limits{Steps: 3, USD: -1}, 0.2, "budget.usd"},
		"finish at 0":    {budget.Limits{Steps: 3}, 0, "budget.finish_at: 0"},
		"finish at 1":    {budget.Limits{Steps: 3}, 1, "budget.finish_at: 1"},
		"finish above 1": {budget.Limits{Steps: 3}, 1.5, "budget.finish_at: 1.5"},
		"finish below 0": {budget.Limits{Steps: 3}, -0.2, "budget.finish_at: -0.2"},
		"finish NaN":     {budget.Limits{Steps: 3}, math.NaN(), "budget.finish_at: NaN"},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := runbudget.NewRunBudget(tc.limits, tc.finishAt, t0)
			assert.Nil(t, r)
			assert.ErrorContains(t, err, tc.wantErr)
		})
	}
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 3}, 0.2, t0)
	require.NoError(t, err)
	assert.Equal(t, &runbudget.RunBudget{Limits: budget.Limits{Steps: 3}, FinishAt: 0.2, Start: t0}, r)
}

func TestRunBudgetSpendAccumulates(t *testing.T) {
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 10}, 0.2, t0)
	require.NoError(t, err)
	r.Spend(budget.Usage{Steps: 1, LeafCalls: 2, Tokens: 300, USD: 0.01})
	r.Spend(budget.Usage{Steps: 2, LeafCalls: 1, Tokens: 700, USD: 0.02})
	assert.Equal(t, 3, r.Used.Steps)
	assert.Equal(t, 3, r.Used.LeafCalls)
	assert.Equal(t, int64(1000), r.Used.Tokens)
	assert.InDelta(t, 0.03, r.Used.USD, 1e-12)
}

func TestRunBudgetArithmetic(t *testing.T) {
	full := budget.Limits{Steps: 10, LeafCalls: 20, Tokens: 1000, USD: 1, Seconds: 100}
	for name, tc := range map[string]struct {
		limits    budget.Limits
		used      budget.Usage
		at        time.Duration // since start
		remaining budget.Remaining
		fraction  float64
		exhausted string
		finish    bool
	}{
		"fresh, all limited": {
			limits: full, at: 0,
			remaining: budget.Remaining{Steps: 10, LeafCalls: 20, Tokens: 1000, USD: 1, Seconds: 100},
			fraction:  1,
		},
		"only steps limited": {
			limits: budget.Limits{Steps: 4}, used: budget.Usage{Steps: 1, LeafCalls: 99, Tokens: 1e9, USD: 1e3}, at: time.Hour,
			remaining: budget.Remaining{Steps: 3, LeafCalls: -1, Tokens: -1, USD: -1, Seconds: -1},
			fraction:  0.75,
		},
		"scarcest dimension decides": {
			limits: full, used: budget.Usage{Steps: 1, LeafCalls: 2, Tokens: 700, USD: 0.1}, at: 10 * time.Second,
			remaining: budget.Remaining{Steps: 9, LeafCalls: 18, Tokens: 300, USD: 0.9, Seconds: 90},
			fraction:  0.3,
		},
		"at the threshold finishes": {
			limits: full, used: budget.Usage{Steps: 8}, at: time.Second,
			remaining: budget.Remaining{Steps: 2, LeafCalls: 20, Tokens: 1000, USD: 1, Seconds: 99},
			fraction:  0.2, finish: true,
		},
		"wall clock decides": {
			limits: full, at: 85 * time.Second,
			remaining: budget.Remaining{Steps: 10, LeafCalls: 20, Tokens: 1000, USD: 1, Seconds: 15},
			fraction:  0.15, finish: true,
		},
		"seconds exhausted": {
			limits: full, at: 100 * time.Second,
			remaining: budget.Remaining{Steps: 10, LeafCalls: 20, Tokens: 1000, USD: 1, Seconds: 0},
			fraction:  0, exhausted: "seconds", finish: true,
		},
		"overspent reports zero, not negative": {
			limits: full, used: budget.Usage{Steps: 3, Tokens: 1500}, at: 0,
			remaining: budget.Remaining{Steps: 7, LeafCalls: 20, Tokens: 0, USD: 1, Seconds: 100},
			fraction:  0, exhausted: "tokens", finish: true,
		},
		"first exhausted in order": {
			limits: full, used: budget.Usage{Steps: 10, LeafCalls: 20, Tokens: 1000, USD: 1}, at: 200 * time.Second,
			remaining: budget.Remaining{},
			fraction:  0, exhausted: "steps", finish: true,
		},
		"leaf calls before tokens": {
			limits: full, used: budget.Usage{Steps: 1, LeafCalls: 20, Tokens: 1000}, at: 0,
			remaining: budget.Remaining{Steps: 9, USD: 1, Seconds: 100},
			fraction:  0, exhausted: "leaf_calls", finish: true,
		},
		"usd": {
			limits: full, used: budget.Usage{Steps: 1, USD: 1.2}, at: 0,
			remaining: budget.Remaining{Steps: 9, LeafCalls: 20, Tokens: 1000, Seconds: 100},
			fraction:  0, exhausted: "usd", finish: true,
		},
		"now before start spends no time": {
			limits: full, at: -time.Minute,
			remaining: budget.Remaining{Steps: 10, LeafCalls: 20, Tokens: 1000, USD: 1, Seconds: 100},
			fraction:  1,
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := runbudget.NewRunBudget(tc.limits, 0.2, t0)
			require.NoError(t, err)
			r.Spend(tc.used)
			now := t0.Add(tc.at)
			got := r.Remaining(now)
			assert.Equal(t, tc.remaining.Steps, got.Steps, "steps")
			assert.Equal(t, tc.remaining.LeafCalls, got.LeafCalls, "leaf calls")
			assert.Equal(t, tc.remaining.Tokens, got.Tokens, "tokens")
			assert.InDelta(t, tc.remaining.USD, got.USD, 1e-9, "usd")
			assert.InDelta(t, tc.remaining.Seconds, got.Seconds, 1e-9, "seconds")
			assert.InDelta(t, tc.fraction, r.FractionLeft(now), 1e-9, "fraction left")
			assert.Equal(t, tc.exhausted, r.Exhausted(now))
			assert.Equal(t, tc.finish, r.ShouldFinish(now))
		})
	}
}

func TestRunBudgetDeadline(t *testing.T) {
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 1, Seconds: 90.5}, 0.2, t0)
	require.NoError(t, err)
	assert.Equal(t, t0.Add(90*time.Second+500*time.Millisecond), r.Deadline())

	r, err = runbudget.NewRunBudget(budget.Limits{Steps: 1}, 0.2, t0)
	require.NoError(t, err)
	assert.True(t, r.Deadline().IsZero(), "no seconds limit, no deadline")

	r, err = runbudget.NewRunBudget(budget.Limits{Steps: 1, Seconds: 1e300}, 0.2, t0)
	require.NoError(t, err)
	assert.True(t, r.Deadline().After(t0), "a huge limit saturates instead of wrapping into the past")
}

func TestRunBudgetNote(t *testing.T) {
	seed := budget.Limits{Steps: 12, Tokens: 20_000, USD: 0.40, Seconds: 90}
	for name, tc := range map[string]struct {
		limits   budget.Limits
		finishAt float64
		used     budget.Usage
		at       time.Duration
		breakers []string
		want     string
	}{
		"the seed's first turn": {
			limits: seed, finishAt: 0.25,
			want: "BUDGET LEFT: 12 steps | 20,000 tokens | 0.40 USD | 90s",
		},
		"the seed's second turn": {
			limits: seed, finishAt: 0.25, used: budget.Usage{Steps: 3, Tokens: 2700, USD: 0.06}, at: 1200 * time.Millisecond,
			want: "BUDGET LEFT: 9 steps | 17,300 tokens | 0.34 USD | 89s",
		},
		"the seed's wrap-up turn": {
			limits: seed, finishAt: 0.25, used: budget.Usage{Steps: 9, Tokens: 8100, USD: 0.18}, at: 2 * time.Second,
			want: "BUDGET LEFT: 3 steps | 11,900 tokens | 0.22 USD | 88s\n" + runbudget.FinishInstruction,
		},
		"only steps": {
			limits: budget.Limits{Steps: 5}, finishAt: 0.2, used: budget.Usage{Steps: 1, Tokens: 5e6},
			want: "BUDGET LEFT: 4 steps",
		},
		"millions and leaf calls": {
			limits: budget.Limits{Steps: 50, LeafCalls: 200, Tokens: 2_500_000}, finishAt: 0.2, used: budget.Usage{LeafCalls: 10, Tokens: 1},
			want: "BUDGET LEFT: 50 steps | 190 leaf calls | 2,499,999 tokens",
		},
		"breakers sorted and deduplicated": {
			limits: budget.Limits{Steps: 5}, finishAt: 0.2, breakers: []string{"shipping", "search", "", "shipping"},
			want: "BUDGET LEFT: 5 steps\nCircuit breakers open: search, shipping (do not plan around them).",
		},
		"breakers then the hard switch": {
			limits: budget.Limits{Steps: 5}, finishAt: 0.2, used: budget.Usage{Steps: 5}, breakers: []string{"crm"},
			want: "BUDGET LEFT: 0 steps\nCircuit breakers open: crm (do not plan around them).\n" + runbudget.FinishInstruction,
		},
		"overspent shows zero": {
			limits: budget.Limits{Steps: 5, USD: 1, Seconds: 10}, finishAt: 0.2, used: budget.Usage{Steps: 7, USD: 3}, at: time.Minute,
			want: "BUDGET LEFT: 0 steps | 0.00 USD | 0s\n" + runbudget.FinishInstruction,
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := runbudget.NewRunBudget(tc.limits, tc.finishAt, t0)
			require.NoError(t, err)
			r.Spend(tc.used)
			assert.Equal(t, tc.want, r.Note(t0.Add(tc.at), tc.breakers))
		})
	}
}

func TestRunBudgetNoteLeavesCallerSliceAlone(t *testing.T) {
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 5}, 0.2, t0)
	require.NoError(t, err)
	breakers := []string{"b", "a", "b"}
	r.Note(t0, breakers)
	assert.Equal(t, []string{"b", "a", "b"}, breakers)
}

func TestFinishInstructionMatchesTheSeed(t *testing.T) {
	for _, phrase := range []string{"Stop exploring.", "best partial answer", "handoff note", "what is done, what is not, and what you would try next."} {
		assert.Contains(t, runbudget.FinishInstruction, phrase)
	}
}

func ExampleRunBudget_Note() {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	run, err := runbudget.NewRunBudget(budget.Limits{Steps: 12, LeafCalls: 8, Tokens: 20_000, USD: 0.40, Seconds: 90}, 0.25, start)
	if err != nil {
		panic(err)
	}
	run.Spend(budget.Usage{Steps: 3, LeafCalls: 3, Tokens: 2_700, USD: 0.06})
	fmt.Println(run.Note(start.Add(time.Second), nil))

	run.Spend(budget.Usage{Steps: 6, LeafCalls: 2, Tokens: 5_400, USD: 0.12})
	fmt.Println(run.Note(start.Add(2*time.Second), []string{"shipping", "search"}))
	// Output:
	// BUDGET LEFT: 9 steps | 5 leaf calls | 17,300 tokens | 0.34 USD | 89s
	// BUDGET LEFT: 3 steps | 3 leaf calls | 11,900 tokens | 0.22 USD | 88s
	// Circuit breakers open: search, shipping (do not plan around them).
	// You are nearly out of budget. Stop exploring. Spend what is left writing the best partial answer you have plus a handoff note saying what is done, what is not, and what you would try next.
}

func TestGrantSharesWhatIsLeftAfterReservations(t *testing.T) {
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 20, LeafCalls: 40, Tokens: 1000, USD: 2, Seconds: 100}, 0.2, t0)
	require.NoError(t, err)
	r.Spend(budget.Usage{Steps: 4, LeafCalls: 8, Tokens: 200, USD: 0.4})
	now := t0.Add(30 * time.Second)

	first, err := r.Grant(now, 0.25)
	require.NoError(t, err)
	assert.Equal(t, budget.Limits{Steps: 4, LeafCalls: 8, Tokens: 200, USD: 0.4, Seconds: 70}, first)
	assert.Equal(t, budget.Usage{}, r.Reserved(), "a grant reserves nothing")

	held := r.Reserve(first)
	assert.Equal(t, budget.Usage{Steps: 4, LeafCalls: 8, Tokens: 200, USD: 0.4}, r.Reserved(), "seconds are shared, not reserved")
	second, err := r.Grant(now, 0.25)
	require.NoError(t, err)
	// (16-4)*0.25, (32-8)*0.25, (800-200)*0.25, (1.6-0.4)*0.25; the same deadline.
	assert.Equal(t, 3, second.Steps)
	assert.Equal(t, 6, second.LeafCalls)
	assert.Equal(t, int64(150), second.Tokens)
	assert.InDelta(t, 0.3, second.USD, 1e-12)
	assert.Equal(t, 70.0, second.Seconds)

	// The child spent less than it was granted: the rest is free again,
	// and what it spent is the parent's spending.
	r.Release(held, budget.Usage{Steps: 2, LeafCalls: 3, Tokens: 50, USD: 0.1})
	assert.Equal(t, budget.Usage{}, r.Reserved())
	assert.Equal(t, budget.Usage{Steps: 6, LeafCalls: 11, Tokens: 250, USD: 0.5}, r.Used)
}

func TestGrantLeavesUnlimitedDimensionsUnlimited(t *testing.T) {
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 9}, 0.2, t0)
	require.NoError(t, err)
	granted, err := r.Grant(t0, 0.5)
	require.NoError(t, err)
	assert.Equal(t, budget.Limits{Steps: 4}, granted, "floor of 9*0.5, and nothing else limited")
}

func TestGrantRefusesWhatIsTooSmallToShare(t *testing.T) {
	for name, tc := range map[string]struct {
		limits budget.Limits
		used   budget.Usage
		at     time.Duration
	}{
		"steps":      {budget.Limits{Steps: 3}, budget.Usage{}, 0},
		"leaf calls": {budget.Limits{Steps: 100, LeafCalls: 3}, budget.Usage{}, 0},
		"tokens":     {budget.Limits{Steps: 100, Tokens: 3}, budget.Usage{}, 0},
		"usd":        {budget.Limits{Steps: 100, USD: 1}, budget.Usage{USD: 1}, 0},
		"seconds":    {budget.Limits{Steps: 100, Seconds: 10}, budget.Usage{}, 10 * time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := runbudget.NewRunBudget(tc.limits, 0.2, t0)
			require.NoError(t, err)
			r.Spend(tc.used)
			_, err = r.Grant(t0.Add(tc.at), 0.25)
			assert.ErrorContains(t, err, "is too small to share")
		})
	}
	// What is reserved counts: a second grant finds too little left.
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 5}, 0.2, t0)
	require.NoError(t, err)
	granted, err := r.Grant(t0, 0.5)
	require.NoError(t, err)
	r.Reserve(granted)
	r.Reserve(granted)
	_, err = r.Grant(t0, 0.5)
	assert.EqualError(t, err, "the budget left ({Steps:5 LeafCalls:-1 Tokens:-1 USD:-1 Seconds:-1}, "+
		"{Steps:4 LeafCalls:0 Tokens:0 USD:0} already handed to sub-agents) is too small to share")
}

func TestRaiseAddsOnlyWhereThereIsALimit(t *testing.T) {
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 3, USD: 1}, 0.2, t0)
	require.NoError(t, err)
	r.Raise(budget.Limits{Steps: 2, USD: 0.5, Tokens: 100, LeafCalls: 4, Seconds: 60})
	assert.Equal(t, budget.Limits{Steps: 5, USD: 1.5}, r.Limits, "an unlimited dimension stays unlimited")

	r, err = runbudget.NewRunBudget(budget.Limits{Steps: 3, LeafCalls: 2, Tokens: 10, Seconds: 5}, 0.2, t0)
	require.NoError(t, err)
	r.Raise(budget.Limits{LeafCalls: 1, Tokens: 5, Seconds: 5, USD: 9})
	assert.Equal(t, budget.Limits{Steps: 3, LeafCalls: 3, Tokens: 15, Seconds: 10}, r.Limits)
}

func TestRestoreTakesUpCarriedLimitsAndSpending(t *testing.T) {
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 3}, 0.2, t0)
	require.NoError(t, err)
	r.Restore(budget.Limits{Steps: 8, USD: 2}, budget.Usage{Steps: 5, USD: 1})
	assert.Equal(t, budget.Limits{Steps: 8, USD: 2}, r.Limits)
	assert.Equal(t, budget.Usage{Steps: 5, USD: 1}, r.Used)
}

// Scarcest names the dimension a graceful finish is for: the wall clock
// once waits have spent most of it, steps when turns have.
func TestScarcestNamesTheDimensionNearestItsEnd(t *testing.T) {
	r, err := runbudget.NewRunBudget(budget.Limits{Steps: 10, USD: 2, Seconds: 300}, 0.2, t0)
	require.NoError(t, err)
	require.Equal(t, "steps", r.Scarcest(t0), "nothing spent: the first in order")
	r.Spend(budget.Usage{Steps: 3, USD: 1})
	require.Equal(t, "usd", r.Scarcest(t0.Add(60*time.Second)))
	require.Equal(t, "seconds", r.Scarcest(t0.Add(242*time.Second)))
	require.InDelta(t, 58.0/300, r.FractionLeft(t0.Add(242*time.Second)), 1e-9)
	r.Spend(budget.Usage{Steps: 6})
	require.Equal(t, "steps", r.Scarcest(t0.Add(242*time.Second)))
}

func TestExhaustedNamesTheSpentDimension(t *testing.T) {
	for _, tc := range []struct {
		limits budget.Limits
		used   budget.Usage
		want   string
	}{
		{budget.Limits{Steps: 3, Tokens: 100}, budget.Usage{Steps: 2, Tokens: 99}, ""},
		{budget.Limits{Steps: 3, Tokens: 100}, budget.Usage{Steps: 3}, "steps"},
		{budget.Limits{Steps: 3, Tokens: 100}, budget.Usage{Steps: 1, Tokens: 100}, "tokens"},
		{budget.Limits{Steps: 3}, budget.Usage{Steps: 1, Tokens: 1e9, USD: 1e9}, ""}, // zero means no limit
	} {
		r, err := runbudget.NewRunBudget(tc.limits, 0.2, t0)
		require.NoError(t, err)
		r.Spend(tc.used)
		assert.Equal(t, tc.want, r.Exhausted(t0), "%+v after %+v", tc.limits, tc.used)
	}
}
