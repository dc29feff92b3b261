package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
)

// StormConfig sizes the retry-storm scenario: Runs runs calling, one call
// after another, a downstream that serves Capacity requests at once (more
// fail with 503, as an overloaded service does) and is fully down from
// OutageFrom to OutageTo; every run stops calling at Duration.
type StormConfig struct {
	Runs                 int
	Capacity             int
	Latency              time.Duration
	OutageFrom, OutageTo time.Duration
	Duration             time.Duration
}

// DefaultStorm fits a 2-core machine in about two minutes for both
// contenders.
var DefaultStorm = StormConfig{Runs: 12, Capacity: 6, Latency: 20 * time.Millisecond,
	OutageFrom: 10 * time.Second, OutageTo: 30 * time.Second, Duration: 50 * time.Second}

// StormRow is one contender's storm.
type StormRow struct {
	Contender string `json:"contender"`
	Requests  int    `json:"requests"`
	Failures  int    `json:"failures"`
	// RecoverySeconds is the time from the end of the outage to the first
	// second with under 1% errors; -1 when that never happened.
	RecoverySeconds int      `json:"recovery_seconds"`
	PerSecond       []Second `json:"per_second"`
}

// Storm runs agentsaga and an unbudgeted baseline (Temporal retrying each
// call up to 10 times, 100 ms to 1 s apart) through the same outage.
func Storm(ctx context.Context, c client.Client, databaseURL string, cfg StormConfig) ([]StormRow, error) {
	contenders := []struct {
		name  string
		start func(queue string) (func(), error)
		wf    any
		input func(url string, until time.Time) any
	}{
		{"agentsaga (hook, ledger, fleet bucket)", func(queue string) (func(), error) {
			store, err := ledger.Open(ctx, databaseURL)
			if err != nil {
				return nil, err
			}
			w, err := worker.New(ctx, c, store, worker.Options{TaskQueue: queue, Bucket: "bench-storm-" + nonce()})
			if err != nil {
				store.Close()
				return nil, err
			}
			w.RegisterWorkflow(ToolCallsWorkflow)
			return func() { w.Stop(); store.Close() }, w.Start()
		}, ToolCallsWorkflow, func(url string, until time.Time) any {
			return ToolCallsInput{URL: url, Calls: 1 << 20, KeepGoing: true, Until: until}
		}},
		{"unbudgeted (Temporal, 10 attempts a call)", func(queue string) (func(), error) {
			w := sdkworker.New(c, queue, sdkworker.Options{})
			w.RegisterWorkflow(BaselineWorkflow)
			w.RegisterActivity(BaselineCall)
			return w.Stop, w.Start()
		}, BaselineWorkflow, func(url string, until time.Time) any {
			return BaselineInput{URL: url, Calls: 1 << 20, MaxAttempts: 10, ScheduleToClose: time.Minute, Until: until}
		}},
	}
	var rows []StormRow
	for i, contender := range contenders {
		queue := fmt.Sprintf("bench-storm-%d-%s", i, nonce())
		stop, err := contender.start(queue)
		if err != nil {
			return nil, fmt.Errorf("bench: storm: %s: %w", contender.name, err)
		}
		down, err := StartDownstream(Faults{Capacity: cfg.Capacity, Latency: cfg.Latency,
			Outages: []Window{{From: cfg.OutageFrom, To: cfg.OutageTo}}}, uint64(i+1))
		if err != nil {
			stop()
			return nil, err
		}
		err = runAll(ctx, c, cfg.Runs, queue, contender.wf, contender.input(down.URL(), time.Now().Add(cfg.Duration)))
		down.Close()
		stop()
		if err != nil {
			return nil, fmt.Errorf("bench: storm: %s: %w", contender.name, err)
		}
		counts := down.Counts()
		rows = append(rows, StormRow{Contender: contender.name, Requests: counts.Requests, Failures: counts.Failures,
			RecoverySeconds: recovery(counts.PerSecond, cfg.OutageTo), PerSecond: counts.PerSecond})
	}
	return rows, nil
}

// recovery is the seconds from the outage's end to the first second with
// requests and under 1% of them failing.
func recovery(seconds []Second, outageEnd time.Duration) int {
	end := int(outageEnd / time.Second)
	for s := end; s < len(seconds); s++ {
		if seconds[s].Requests > 0 && float64(seconds[s].Failures) < 0.01*float64(seconds[s].Requests) {
			return s - end
		}
	}
	return -1
}

// PrintStorm writes the storm's table and, per contender, its load and
// error rate second by second.
func PrintStorm(out io.Writer, title string, cfg StormConfig, rows []StormRow) {
	fmt.Fprintf(out, "%s\n", title)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CONTENDER\tREQUESTS\tFAILED\tRECOVERY AFTER THE OUTAGE")
	for _, r := range rows {
		recovered := "never (< 1% errors not reached)"
		if r.RecoverySeconds >= 0 {
			recovered = fmt.Sprintf("%d s", r.RecoverySeconds)
		}
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\n", r.Contender, r.Requests, r.Failures, recovered)
	}
	tw.Flush()
	for _, r := range rows {
		fmt.Fprintf(out, "\n  %s, second by second (requests/failed%%), outage %v-%v:\n  ", r.Contender, cfg.OutageFrom, cfg.OutageTo)
		var parts []string
		for s, sec := range r.PerSecond {
			pct := 0.0
			if sec.Requests > 0 {
				pct = 100 * float64(sec.Failures) / float64(sec.Requests)
			}
			parts = append(parts, fmt.Sprintf("%d:%d/%.0f%%", s, sec.Requests, pct))
		}
		fmt.Fprintln(out, strings.Join(parts, " "))
	}
}
