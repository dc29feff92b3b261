package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"go.temporal.io/sdk/workflow"
)

// DrainConfig sizes the backlog-drain scenario (issue 22): Calls calls
// arrive as an Outage of a downstream that serves RatePerSecond begins, and
// each is parked behind the open breaker. No call arrives after that, so
// what follows the outage is the backlog draining alone, at the rate the
// breaker releases it.
type DrainConfig struct {
	Calls         int           `json:"calls"`
	RatePerSecond int           `json:"rate_per_second"`
	Latency       time.Duration `json:"latency"`
	Outage        time.Duration `json:"outage"`
}

// DefaultDrain is the backlog issue 22 measured: 150 parked calls and a
// service that takes 10 a second, so 15 s at capacity.
var DefaultDrain = DrainConfig{Calls: 150, RatePerSecond: 10, Latency: 20 * time.Millisecond, Outage: 20 * time.Second}

// DrainRow is one contender's drain.
type DrainRow struct {
	Contender string `json:"contender"`
	// Declared is the rate the tool declares (requests a minute); 0: none.
	Declared    int64 `json:"declared_per_minute"`
	Calls       int   `json:"calls"`
	FailedCalls int   `json:"failed_calls"`
	Requests    int   `json:"requests"`
	AfterOutage int   `json:"requests_after_outage"`
	FailedAfter int   `json:"failed_after_outage"`
	// DrainSeconds runs from the first second a request was served after
	// the outage to the last; SinceOutageSeconds from the outage's end,
	// the breaker's probe delay included.
	DrainSeconds       int `json:"drain_seconds"`
	SinceOutageSeconds int `json:"since_outage_seconds"`
	// IdealSeconds is what the service's capacity allows for the calls
	// served after the outage.
	IdealSeconds float64 `json:"ideal_seconds"`
	// ReleaseRate, where nothing is declared, is the dependency's adaptive
	// release rate (releases a second) when the drain began, which spaced
	// the parked calls' release slots, and LearnedRate what it was when the
	// drain had ended (budget.AdaptiveRelease, migration 00018).
	ReleaseRate float64 `json:"release_rate,omitempty"`
	LearnedRate float64 `json:"learned_rate,omitempty"`
	// PerSecond is what the service counted, second by second.
	PerSecond []Second `json:"per_second"`
}

// DrainTarget is issue 22's bound: the backlog drains within 2 s of what
// the service's capacity allows.
const DrainTarget = 2

// Drain runs the backlog through agentsaga's breaker twice, one contender
// after the other, each with its own downstream, worker and breaker: once
// with the tool declaring the rate its service takes, once without (the
// adaptive release rate, which a new dependency starts at
// budget.DefaultBreaker.AdaptiveRate().Start).
func Drain(ctx context.Context, c client.Client, databaseURL string, cfg DrainConfig) ([]DrainRow, error) {
	if cfg.Calls < 1 || cfg.RatePerSecond < 1 || cfg.Outage < 5*time.Second {
		return nil, fmt.Errorf("bench: drain: calls %d and rate per second %d must be positive, and the outage (%v) at least 5 s (the calls arrive as it begins)",
			cfg.Calls, cfg.RatePerSecond, cfg.Outage)
	}
	var rows []DrainRow
	for _, declared := range []int64{int64(cfg.RatePerSecond) * 60, 0} {
		row, err := drainOne(ctx, c, databaseURL, cfg, declared)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func drainOne(ctx context.Context, c client.Client, databaseURL string, cfg DrainConfig, declared int64) (DrainRow, error) {
	name := "agentsaga, rate not declared (adaptive)"
	if declared > 0 {
		name = fmt.Sprintf("agentsaga, rate_limit: {requests_per_minute: %d}", declared)
	}
	queue := "bench-drain-" + nonce()
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		return DrainRow{}, fmt.Errorf("bench: drain: %w", err)
	}
	defer store.Close()
	w, err := startEngineWorker(ctx, c, store, queue, "bench-drain-"+nonce(), DrainWorkflow)
	if err != nil {
		return DrainRow{}, fmt.Errorf("bench: drain: %w", err)
	}
	defer w.Stop()
	down, err := StartDownstream(Faults{RatePerSecond: cfg.RatePerSecond, Latency: cfg.Latency,
		Outages: []Window{{From: 0, To: cfg.Outage}}}, 1)
	if err != nil {
		return DrainRow{}, err
	}
	defer down.Close()
	// The calls all arrive at the outage's start, from a few runs: what
	// follows is the backlog alone.
	const runs = 10
	started := make([]client.WorkflowRun, runs)
	for r := range started {
		in := DrainInput{URL: down.URL(), Calls: cfg.Calls/runs + btoi(r < cfg.Calls%runs), ToolRate: declared}
		if started[r], err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-%d", queue, r), TaskQueue: queue}, DrainWorkflow, in); err != nil {
			return DrainRow{}, fmt.Errorf("bench: drain: %s: start run %d: %w", name, r, err)
		}
	}
	dependency := "tool:echo@" + queue // as agentsagaSend names it
	var result OpenLoopResult
	for _, run := range started {
		var one OpenLoopResult
		if err := run.Get(ctx, &one); err != nil {
			return DrainRow{}, fmt.Errorf("bench: drain: %s: %w", name, err)
		}
		result.Calls += one.Calls
		result.Failed += one.Failed
	}
	counts := down.Counts()
	row := DrainRow{Contender: name, Declared: declared, Calls: result.Calls, FailedCalls: result.Failed, Requests: counts.Requests,
		PerSecond: counts.PerSecond}
	// The drain: from the first second a request was served after the
	// outage (the breaker's probe closed it) to the last.
	end := int(cfg.Outage / time.Second)
	first := -1
	for s := end; s < len(counts.PerSecond); s++ {
		second := counts.PerSecond[s]
		row.AfterOutage += second.Requests
		row.FailedAfter += second.Failures
		if second.Requests > second.Failures {
			if first < 0 {
				first = s
			}
			row.DrainSeconds, row.SinceOutageSeconds = s+1-first, s+1-end
		}
	}
	row.IdealSeconds = float64(row.AfterOutage-row.FailedAfter) / float64(cfg.RatePerSecond)
	if declared == 0 {
		row.ReleaseRate = budget.DefaultBreaker.AdaptiveRate().Start // a new dependency's
		if row.LearnedRate, err = ledgerdb.Of(store).ReleaseRate(ctx, dependency, budget.DefaultBreaker); err != nil {
			return DrainRow{}, fmt.Errorf("bench: drain: %s: %w", name, err)
		}
	}
	return row, nil
}

// DrainInput is one run of the drain: Calls calls at once, through
// agentsaga's tool call path, each parked while the breaker refuses it.
type DrainInput struct {
	URL      string `json:"url"`
	Calls    int    `json:"calls"`
	ToolRate int64  `json:"tool_rate,omitempty"`
}

// DrainWorkflow makes in.Calls parked calls at once and counts how they
// ended.
func DrainWorkflow(ctx workflow.Context, in DrainInput) (OpenLoopResult, error) {
	calls := make([]workflow.Future, in.Calls)
	for i := range calls {
		calls[i] = parkedCall(ctx, in.URL, i, 1<<30, in.ToolRate)
	}
	result := OpenLoopResult{Calls: len(calls)}
	for _, f := range calls {
		if f.Get(ctx, nil) != nil {
			result.Failed++
		}
	}
	return result, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// PrintDrain writes the drain's table.
func PrintDrain(out io.Writer, cfg DrainConfig, rows []DrainRow) {
	fmt.Fprintf(out, "backlog drain: %d calls parked during a %v outage of a service that takes %d a second; no call arrives after it\n",
		cfg.Calls, cfg.Outage, cfg.RatePerSecond)
	tw := newTable(out, "  CONTENDER\tCALLS\tFAILED CALLS\tREQUESTS AFTER THE OUTAGE\tDRAINED IN\tCAPACITY ALLOWS\tTARGET\tLAST CALL AFTER THE OUTAGE\tRELEASE RATE")
	for _, r := range rows {
		verdict := "met"
		if float64(r.DrainSeconds) > r.IdealSeconds+DrainTarget {
			verdict = "MISSED"
		}
		rate := fmt.Sprintf("declared: %.1f/s", 0.95*float64(r.Declared)/60)
		if r.Declared == 0 {
			rate = fmt.Sprintf("adaptive: %.1f/s, %.2f/s after", r.ReleaseRate, r.LearnedRate)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d s\t%.0f s\t<= %.0f s (%s)\t%d s\t%s\n", r.Contender, r.Calls, r.FailedCalls, r.AfterOutage, r.DrainSeconds,
			r.IdealSeconds, r.IdealSeconds+DrainTarget, verdict, r.SinceOutageSeconds, rate)
	}
	tw.Flush()
	fmt.Fprintln(out, "  drained in: from the first second a request was served after the outage (the breaker's probe closed it) to the last;")
	fmt.Fprintln(out, "  the last call after the outage adds the probe's delay (up to a cooldown, 5 s); a declared rate is released at 95% of it")
}
