package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// ToolCallsInput is one run of ToolCallsWorkflow.
type ToolCallsInput struct {
	URL   string `json:"url"`
	Calls int    `json:"calls"`
	// KeepGoing makes a failed call count and the run go on, as an agent
	// would, instead of failing the run.
	KeepGoing bool `json:"keep_going,omitempty"`
	// Until, when set, stops making calls at this time.
	Until time.Time `json:"until,omitempty"`
}

// ToolCallsWorkflow makes Calls tool calls one after another through the
// full agentsaga path: the retry hook, the ledger claim and completion, the
// leaf-call rows, the Idempotency-Key header.
func ToolCallsWorkflow(ctx workflow.Context, in ToolCallsInput) (failed int, err error) {
	for i := range in.Calls {
		if !in.Until.IsZero() && workflow.Now(ctx).After(in.Until) {
			break
		}
		err := agentsagaCall(ctx, in.URL, i, 1<<30).Get(ctx, nil)
		if err != nil {
			if !in.KeepGoing {
				return failed, err
			}
			failed++
		}
	}
	return failed, nil
}

// OverheadRow is one side of the overhead scenario.
type OverheadRow struct {
	Contender   string  `json:"contender"`
	Calls       int     `json:"calls"`
	Seconds     float64 `json:"seconds"`
	CallsPerSec float64 `json:"calls_per_second"`
	// MeanLatencyMs is the wall time of one call inside its workflow.
	MeanLatencyMs float64 `json:"mean_latency_ms"`
	// Ratio is this contender's latency over the plain activity's.
	Ratio float64 `json:"ratio"`
}

// Overhead runs the same HTTP call as a plain Temporal activity and through
// agentsaga's interceptor and ledger, side by side on one dev server, with
// cfg.Runs runs of cfg.Calls sequential calls each on one worker.
func Overhead(ctx context.Context, c client.Client, databaseURL string, cfg AmplificationConfig) ([]OverheadRow, error) {
	down, err := StartDownstream(Faults{}, 1)
	if err != nil {
		return nil, err
	}
	defer down.Close()
	measure := func(name string, start func(queue string) (func(), error), wf, input any) (OverheadRow, error) {
		queue := "bench-overhead-" + nonce()
		stop, err := start(queue)
		if err != nil {
			return OverheadRow{}, err
		}
		defer stop()
		began := time.Now()
		if err := runAll(ctx, c, cfg.Runs, queue, wf, input); err != nil {
			return OverheadRow{}, fmt.Errorf("bench: overhead: %s: %w", name, err)
		}
		seconds := time.Since(began).Seconds()
		calls := cfg.Runs * cfg.Calls
		return OverheadRow{Contender: name, Calls: calls, Seconds: seconds, CallsPerSec: float64(calls) / seconds,
			MeanLatencyMs: 1000 * seconds / float64(cfg.Calls)}, nil
	}
	plain, err := measure("plain Temporal activity", func(queue string) (func(), error) {
		w := sdkworker.New(c, queue, sdkworker.Options{})
		w.RegisterWorkflow(BaselineWorkflow)
		w.RegisterActivity(BaselineCall)
		return w.Stop, w.Start()
	}, BaselineWorkflow, BaselineInput{URL: down.URL(), Calls: cfg.Calls, MaxAttempts: 1, ScheduleToClose: time.Minute})
	if err != nil {
		return nil, err
	}
	saga, err := measure("agentsaga tool call (hook + ledger)", func(queue string) (func(), error) {
		return startEngineWorkerOn(ctx, c, databaseURL, queue, "bench-overhead", ToolCallsWorkflow)
	}, ToolCallsWorkflow, ToolCallsInput{URL: down.URL(), Calls: cfg.Calls})
	if err != nil {
		return nil, err
	}
	plain.Ratio, saga.Ratio = 1, saga.MeanLatencyMs/plain.MeanLatencyMs
	return []OverheadRow{plain, saga}, nil
}

// PrintOverhead writes the overhead scenario's table.
func PrintOverhead(out io.Writer, title string, rows []OverheadRow) {
	fmt.Fprintf(out, "%s\n", title)
	tw := newTable(out, "  CONTENDER\tCALLS\tSECONDS\tCALLS/S\tMEAN LATENCY\tRATIO\tTARGET")
	for i, r := range rows {
		target := targetCell(i > 0, "<= 1.10", r.Ratio <= 1.1)
		fmt.Fprintf(tw, "  %s\t%d\t%.1f\t%.1f\t%.1f ms\t%.2f\t%s\n", r.Contender, r.Calls, r.Seconds, r.CallsPerSec, r.MeanLatencyMs, r.Ratio, target)
	}
	tw.Flush()
}
