package bench

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
)

// DrainConfig sizes the backlog-drain scenario (issue 22): Calls calls
// arrive within the first ArriveWithin of an Outage of a downstream that
// serves RatePerSecond, and each is parked behind the open breaker. No
// call arrives after that, so what follows the outage is the backlog
// draining alone, at the rate the breaker releases it.
type DrainConfig struct {
	Calls         int           `json:"calls"`
	RatePerSecond int           `json:"rate_per_second"`
	Latency       time.Duration `json:"latency"`
	Outage        time.Duration `json:"outage"`
	ArriveWithin  time.Duration `json:"arrive_within"`
}

// DefaultDrain is the backlog issue 22 measured: 150 parked calls and a
// service that takes 10 a second, so 15 s at capacity.
var DefaultDrain = DrainConfig{Calls: 150, RatePerSecond: 10, Latency: 20 * time.Millisecond,
	Outage: 20 * time.Second, ArriveWithin: 10 * time.Second}

// DrainRow is one contender's drain.
type DrainRow struct {
	Contender string `json:"contender"`
	// Declared is the rate the tool declares (requests a minute); 0: none.
	Declared     int64 `json:"declared_per_minute"`
	Calls        int   `json:"calls"`
	FailedCalls  int   `json:"failed_calls"`
	Requests     int   `json:"requests"`
	AfterOutage  int   `json:"requests_after_outage"`
	FailedAfter  int   `json:"failed_after_outage"`
	DrainSeconds int   `json:"drain_seconds"`
	// IdealSeconds is what the service's capacity allows for the calls
	// served after the outage.
	IdealSeconds float64 `json:"ideal_seconds"`
}

// DrainTarget is issue 22's bound: the backlog drains within 2 s of what
// the service's capacity allows.
const DrainTarget = 2

// Drain runs the backlog through agentsaga's breaker twice, one contender
// after the other, each with its own downstream, worker and breaker: once
// with the tool declaring the rate its service takes, once without (the
// breaker's own release interval, a tenth of its cooldown).
func Drain(ctx context.Context, c client.Client, databaseURL string, cfg DrainConfig) ([]DrainRow, error) {
	if cfg.Calls < 1 || cfg.RatePerSecond < 1 || cfg.ArriveWithin <= 0 || cfg.ArriveWithin >= cfg.Outage {
		return nil, fmt.Errorf("bench: drain: calls %d and rate per second %d must be positive, and the calls must arrive (within %v) during the outage (%v)",
			cfg.Calls, cfg.RatePerSecond, cfg.ArriveWithin, cfg.Outage)
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
	name := "agentsaga, rate not declared (the breaker's own interval)"
	if declared > 0 {
		name = fmt.Sprintf("agentsaga, rate_limit: {requests_per_minute: %d}", declared)
	}
	queue := "bench-drain-" + nonce()
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		return DrainRow{}, fmt.Errorf("bench: drain: %w", err)
	}
	defer store.Close()
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, Bucket: "bench-drain-" + nonce()}})
	if err != nil {
		return DrainRow{}, fmt.Errorf("bench: drain: %w", err)
	}
	w.RegisterWorkflow(StormAgentsagaWorkflow)
	if err := w.Start(); err != nil {
		return DrainRow{}, fmt.Errorf("bench: drain: %w", err)
	}
	defer w.Stop()
	down, err := StartDownstream(Faults{RatePerSecond: cfg.RatePerSecond, Latency: cfg.Latency,
		Outages: []Window{{From: 0, To: cfg.Outage}}}, 1)
	if err != nil {
		return DrainRow{}, err
	}
	defer down.Close()
	// A run makes a call a second (a workflow timer's resolution on the
	// dev server is about that), so the calls come from enough runs,
	// their starts spread over the first second.
	perRun := max(int(cfg.ArriveWithin/time.Second), 1)
	runs := (cfg.Calls + perRun - 1) / perRun
	until := time.Now().Add(time.Duration(perRun)*time.Second + 500*time.Millisecond)
	started := make([]client.WorkflowRun, runs)
	for r := range started {
		in := OpenLoopInput{URL: down.URL(), Interval: time.Second, Offset: time.Second * time.Duration(r) / time.Duration(runs),
			Until: until, ToolRate: declared}
		if started[r], err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-%d", queue, r), TaskQueue: queue}, StormAgentsagaWorkflow, in); err != nil {
			return DrainRow{}, fmt.Errorf("bench: drain: %s: start run %d: %w", name, r, err)
		}
	}
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
	row := DrainRow{Contender: name, Declared: declared, Calls: result.Calls, FailedCalls: result.Failed, Requests: counts.Requests}
	// The drain: from the outage's end to the last second a request was
	// served.
	end := int(cfg.Outage / time.Second)
	for s := end; s < len(counts.PerSecond); s++ {
		second := counts.PerSecond[s]
		row.AfterOutage += second.Requests
		row.FailedAfter += second.Failures
		if second.Requests > second.Failures {
			row.DrainSeconds = s + 1 - end
		}
	}
	row.IdealSeconds = float64(row.AfterOutage-row.FailedAfter) / float64(cfg.RatePerSecond)
	return row, nil
}

// PrintDrain writes the drain's table.
func PrintDrain(out io.Writer, cfg DrainConfig, rows []DrainRow) {
	fmt.Fprintf(out, "backlog drain: %d calls parked during a %v outage of a service that takes %d a second; no call arrives after it\n",
		cfg.Calls, cfg.Outage, cfg.RatePerSecond)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CONTENDER\tCALLS\tFAILED CALLS\tREQUESTS AFTER THE OUTAGE\tDRAINED IN\tCAPACITY ALLOWS\tTARGET")
	for _, r := range rows {
		target := "-"
		if r.Declared > 0 {
			verdict := "met"
			if float64(r.DrainSeconds) > r.IdealSeconds+DrainTarget {
				verdict = "MISSED"
			}
			target = fmt.Sprintf("<= %.0f s (%s)", r.IdealSeconds+DrainTarget, verdict)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d s\t%.0f s\t%s\n", r.Contender, r.Calls, r.FailedCalls, r.AfterOutage, r.DrainSeconds, r.IdealSeconds, target)
	}
	tw.Flush()
	fmt.Fprintln(out, "  drained in: from the outage's end to the last second a request was served; the breaker closes at its first probe after the outage (cooldown 5 s)")
}
