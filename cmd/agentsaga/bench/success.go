package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/workflows"
)

// SuccessRow is one contender's logical success rate at one failure rate.
type SuccessRow struct {
	Contender    string  `json:"contender"`
	FailureRate  float64 `json:"failure_rate"`
	LogicalCalls int     `json:"logical_calls"`
	Succeeded    int     `json:"succeeded"`
	SuccessRate  float64 `json:"success_rate"`
	// Ideal is 1 - p^3: what three independent attempts give.
	Ideal    float64 `json:"ideal"`
	Target   float64 `json:"target,omitempty"`
	Requests int     `json:"requests"`
}

// successTargets are ARCHITECTURE.md's (Targets, logical success), with
// p = 20% raised from 98.5% to issue 15's 99.0% (the ideal 1-p^3 is 99.2%).
var successTargets = map[float64]float64{0.05: 0.999, 0.20: 0.990}

// Success runs every contender against independent failures at each rate,
// with 3 attempts per call, and reports the share of logical calls that
// succeeded.
func Success(ctx context.Context, c client.Client, databaseURL string, cfg AmplificationConfig, rates []float64) ([]SuccessRow, error) {
	var rows []SuccessRow
	for _, p := range rates {
		logical := cfg.Runs * cfg.Calls
		ideal := 1 - math.Pow(p, 3)

		down, err := StartDownstream(Faults{FailureRate: p}, uint64(p*1000)+7)
		if err != nil {
			return nil, err
		}
		var mu sync.Mutex
		succeeded := 0
		err = runAgentsInto(ctx, c, databaseURL, cfg, down.URL(), fmt.Sprintf("bench-success-a-%s", nonce()), agentOptions{},
			func(_ int, run client.WorkflowRun) error {
				var result workflows.RunResult
				if err := run.Get(ctx, &result); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				for _, e := range result.Trace {
					if e.Kind == "tool" && e.Error == "" {
						succeeded++
					}
				}
				return nil
			})
		down.Close()
		if err != nil {
			return nil, fmt.Errorf("bench: success at p=%v: agentsaga: %w", p, err)
		}
		rows = append(rows, SuccessRow{Contender: "agentsaga (3 attempts, run ratio, fleet bucket)", FailureRate: p, LogicalCalls: logical,
			Succeeded: succeeded, SuccessRate: float64(succeeded) / float64(logical), Ideal: ideal, Target: successTargets[p], Requests: down.Counts().Requests})

		down, err = StartDownstream(Faults{FailureRate: p}, uint64(p*1000)+7)
		if err != nil {
			return nil, err
		}
		failed := 0
		err = runBaselinesInto(ctx, c, cfg, fmt.Sprintf("bench-success-b-%s", nonce()),
			BaselineInput{URL: down.URL(), Calls: cfg.Calls, MaxAttempts: 3, ScheduleToClose: time.Minute},
			func(_ int, run client.WorkflowRun) error {
				var n int
				if err := run.Get(ctx, &n); err != nil {
					return err
				}
				mu.Lock()
				failed += n
				mu.Unlock()
				return nil
			})
		down.Close()
		if err != nil {
			return nil, fmt.Errorf("bench: success at p=%v: baseline: %w", p, err)
		}
		rows = append(rows, SuccessRow{Contender: "Temporal, 3 attempts, no budget", FailureRate: p, LogicalCalls: logical,
			Succeeded: logical - failed, SuccessRate: float64(logical-failed) / float64(logical), Ideal: ideal, Requests: down.Counts().Requests})
	}
	return rows, nil
}

// PrintSuccess writes the success scenario's table.
func PrintSuccess(out io.Writer, title string, rows []SuccessRow) {
	fmt.Fprintf(out, "%s\n", title)
	tw := newTable(out, "  CONTENDER\tP\tLOGICAL CALLS\tSUCCEEDED\tSUCCESS\tIDEAL 1-p^3\tTARGET\tREQUESTS")
	for _, r := range rows {
		target := targetCell(r.Target > 0, fmt.Sprintf(">= %.1f%%", 100*r.Target), r.SuccessRate >= r.Target)
		fmt.Fprintf(tw, "  %s\t%.2f\t%d\t%d\t%.2f%%\t%.2f%%\t%s\t%d\n", r.Contender, r.FailureRate, r.LogicalCalls, r.Succeeded,
			100*r.SuccessRate, 100*r.Ideal, target, r.Requests)
	}
	tw.Flush()
}
