package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// AmplificationConfig sizes the amplification scenario: Runs runs of Calls
// tool calls each, spread over Workers worker processes (each with its own
// Postgres pool), against a downstream that is 100% down.
type AmplificationConfig struct {
	Runs, Calls, Workers int
}

// DefaultAmplification fits a 2-core machine in well under a minute.
var DefaultAmplification = AmplificationConfig{Runs: 20, Calls: 5, Workers: 3}

// Row is one contender's figures.
type Row struct {
	Contender     string  `json:"contender"`
	LogicalCalls  int     `json:"logical_calls"`
	Requests      int     `json:"requests"`
	Amplification float64 `json:"amplification"`
	// Target is the bound agentsaga promises, where it applies.
	Target  float64 `json:"target,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Amplification runs every contender against a full outage and reports
// requests at the downstream per logical call.
func Amplification(ctx context.Context, c client.Client, databaseURL string, cfg AmplificationConfig) ([]Row, error) {
	floor := budget.RetryPolicy{}.WithDefaults().Floor
	contenders := []struct {
		name   string
		target float64
		run    func(ctx context.Context, url, queue string) error
	}{
		{"agentsaga (breakers and parking, shared bucket, run ratio)", BreakerAmplificationTarget, func(ctx context.Context, url, queue string) error {
			return runAgents(ctx, c, databaseURL, cfg, url, queue, agentOptions{breakers: true})
		}},
		{"budgets alone (agentsaga, breakers off: shared bucket, run ratio)", 1.2 + float64(floor)/float64(cfg.Calls), func(ctx context.Context, url, queue string) error {
			return runAgents(ctx, c, databaseURL, cfg, url, queue, agentOptions{})
		}},
		{"per-worker buckets, no breakers (not shared)", 0, func(ctx context.Context, url, queue string) error {
			return runAgents(ctx, c, databaseURL, cfg, url, queue, agentOptions{perWorker: true})
		}},
		{"stacked layers (SDK 2 x wrapper 3 x step 3)", 0, func(ctx context.Context, url, queue string) error {
			return runBaselines(ctx, c, cfg, queue, BaselineInput{URL: url, Calls: cfg.Calls, ClientRetries: 1, WrapperRetries: 2, MaxAttempts: 3, ScheduleToClose: time.Minute})
		}},
		{"Temporal default retry policy (unbounded, 5 s schedule-to-close)", 0, func(ctx context.Context, url, queue string) error {
			return runBaselines(ctx, c, cfg, queue, BaselineInput{URL: url, Calls: cfg.Calls, ScheduleToClose: 5 * time.Second})
		}},
	}
	var rows []Row
	for i, contender := range contenders {
		down, err := StartDownstream(Faults{FailureRate: 1}, uint64(i+1))
		if err != nil {
			return nil, err
		}
		started := time.Now()
		err = contender.run(ctx, down.URL(), fmt.Sprintf("bench-amplification-%d-%s", i, nonce()))
		down.Close()
		if err != nil {
			return nil, fmt.Errorf("bench: %s: %w", contender.name, err)
		}
		counts := down.Counts()
		logical := cfg.Runs * cfg.Calls
		rows = append(rows, Row{Contender: contender.name, LogicalCalls: logical, Requests: counts.Requests,
			Amplification: float64(counts.Requests) / float64(logical), Target: contender.target, Seconds: time.Since(started).Seconds()})
	}
	return rows, nil
}

// BreakerAmplificationTarget is the amplification agentsaga promises under
// a 100% outage with its breakers on: the breaker opens after its threshold
// of failures fleet-wide, and every call after that is parked at its gate
// without a request, so the requests are the first attempts, the few
// retries granted before it opened, and one probe per cooldown.
const BreakerAmplificationTarget = 1.1

// BreakerOpenEscalation is escalate.after_breaker_open_seconds in the
// amplification runs with breakers on: their calls wait behind the open
// breaker, and at the first refusal after it has been open that long the
// runs escalate; the harness, which has no human, lets their deadline
// (breakerRunSeconds) end them.
const BreakerOpenEscalation = 10

// breakerRunSeconds is the deadline of those runs. It leaves room for the
// parked calls' release slots (the queue of all the scenario's calls, one
// slot per release interval) before the graceful finish is due (finish_at,
// written into the spec), so that a run can afford to wait for its slot
// and is escalated for the outage, not for its budget.
func breakerRunSeconds(calls int, finishAt float64) int {
	queue := float64(calls) * budget.DefaultBreaker.ReleaseInterval().Seconds()
	return int(math.Ceil((BreakerOpenEscalation+queue)/(1-finishAt))) + 5
}

// agentOptions says how the agentsaga runs of a scenario are set up.
type agentOptions struct {
	// breakers on: the default breaker, and the runs park behind it (for
	// BreakerOpenEscalation seconds). Off: a threshold no outage reaches,
	// so that the figure measures the retry budgets alone.
	breakers bool
	// perWorker gives each worker a bucket of its own.
	perWorker bool
}

// runAgents runs cfg.Runs agentsaga runs on cfg.Workers workers.
func runAgents(ctx context.Context, c client.Client, databaseURL string, cfg AmplificationConfig, url, queue string, opts agentOptions) error {
	return runAgentsInto(ctx, c, databaseURL, cfg, url, queue, opts, func(int, client.WorkflowRun) error { return nil })
}

func runAgentsInto(ctx context.Context, c client.Client, databaseURL string, cfg AmplificationConfig, url, queue string, opts agentOptions,
	collect func(int, client.WorkflowRun) error) error {
	// The tool's name is the breaker's (tool:NAME), which lives in the
	// ledger: one of its own keeps a breaker an earlier row opened from
	// refusing this row's calls.
	tool := "down_" + nonce()
	var calls []string
	for i := range cfg.Calls {
		calls = append(calls, fmt.Sprintf("{name: %s, arguments: {n: %d}}", tool, i))
	}
	budgetLine, breaker := "budget: {steps: 4, seconds: 120}", budget.BreakerConfig{Threshold: 1 << 30, Window: time.Minute, Cooldown: time.Minute}
	if opts.breakers {
		const finishAt = 0.2
		budgetLine = fmt.Sprintf("budget: {steps: 4, seconds: %d}\nfinish_at: %g\nescalate: {after_breaker_open_seconds: %d}",
			breakerRunSeconds(cfg.Runs*cfg.Calls, finishAt), finishAt, BreakerOpenEscalation)
		breaker = budget.BreakerConfig{} // the worker's default
	}
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: call the downstream service
%s
model:
  provider: scripted
  script:
    - tool_calls: [%s]
    - content: the service is down
tools:
  - {name: %s, kind: http, url: %q}
`, budgetLine, strings.Join(calls, ", "), tool, url)))
	if err != nil {
		return err
	}
	bucket := "bench-" + nonce()
	stop, err := startWorkers(ctx, cfg.Workers, func(i int, store *ledger.Store) (sdkworker.Worker, error) {
		wopts := worker.Options{Config: agentsaga.Config{TaskQueue: queue, Bucket: bucket, Breaker: breaker}}
		if opts.perWorker {
			wopts.Bucket = fmt.Sprintf("%s-worker-%d", bucket, i)
		}
		return worker.New(ctx, c, store, wopts)
	}, databaseURL)
	if err != nil {
		return err
	}
	defer stop()
	return runAllInto(ctx, cfg.Runs, queue, startAgentRun(c, queue, spec), collect)
}

func runBaselines(ctx context.Context, c client.Client, cfg AmplificationConfig, queue string, in BaselineInput) error {
	return runBaselinesInto(ctx, c, cfg, queue, in, func(int, client.WorkflowRun) error { return nil })
}

func runBaselinesInto(ctx context.Context, c client.Client, cfg AmplificationConfig, queue string, in BaselineInput,
	collect func(int, client.WorkflowRun) error) error {
	stop, err := startWorkers(ctx, cfg.Workers, func(int, *ledger.Store) (sdkworker.Worker, error) {
		w := sdkworker.New(c, queue, sdkworker.Options{})
		w.RegisterWorkflow(BaselineWorkflow)
		w.RegisterActivity(BaselineCall)
		return w, nil
	}, "")
	if err != nil {
		return err
	}
	defer stop()
	return runAllInto(ctx, cfg.Runs, queue, startWorkflow(c, queue, BaselineWorkflow, in), collect)
}

// startWorkers starts n workers, each with its own ledger pool when
// databaseURL is set, as separate processes would have.
func startWorkers(ctx context.Context, n int, build func(int, *ledger.Store) (sdkworker.Worker, error), databaseURL string) (func(), error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	for i := range n {
		var store *ledger.Store
		if databaseURL != "" {
			var err error
			if store, err = ledger.Open(ctx, databaseURL); err != nil {
				stopAll()
				return nil, err
			}
			stops = append(stops, store.Close)
		}
		w, err := build(i, store)
		if err != nil {
			stopAll()
			return nil, err
		}
		if err := w.Start(); err != nil {
			stopAll()
			return nil, err
		}
		stops = append(stops, w.Stop)
	}
	return stopAll, nil
}

// runAll starts n runs of workflow at once and waits for all of them.
func runAll(ctx context.Context, c client.Client, n int, queue string, workflow, input any) error {
	return runAllInto(ctx, n, queue, startWorkflow(c, queue, workflow, input), func(int, client.WorkflowRun) error { return nil })
}

// startRun starts one run under ID id.
type startRun func(ctx context.Context, id string) (client.WorkflowRun, error)

// startWorkflow starts a baseline's workflow, as its authors would.
func startWorkflow(c client.Client, queue string, workflow, input any) startRun {
	return func(ctx context.Context, id string) (client.WorkflowRun, error) {
		return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflow, input)
	}
}

// startAgentRun starts an agentsaga run as a user does, through the
// facade (agentsaga.Start: the spec resolved, the namespaced workflow
// name, the search attributes where the namespace has them), so that what
// a benchmark measures is what users run. The benchmarks' IDs are new
// each time: the ledger is not asked.
func startAgentRun(c client.Client, queue string, spec workflows.RunSpec) startRun {
	return func(ctx context.Context, id string) (client.WorkflowRun, error) {
		run, err := agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{TaskQueue: queue, SkipLedgerCheck: true})
		if err != nil {
			return nil, err
		}
		return c.GetWorkflow(ctx, run.ID, run.RunID), nil
	}
}

// runAllInto starts n runs at once, as queue-0 to queue-(n-1), waits for
// all of them, and looks at each finished run.
func runAllInto(ctx context.Context, n int, queue string, start startRun, collect func(int, client.WorkflowRun) error) error {
	runs := make([]client.WorkflowRun, n)
	for i := range runs {
		run, err := start(ctx, fmt.Sprintf("%s-%d", queue, i))
		if err != nil {
			return err
		}
		runs[i] = run
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = run.Get(ctx, nil); errs[i] == nil {
				errs[i] = collect(i, run)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// PrintRows writes a scenario's table.
func PrintRows(out io.Writer, title string, rows []Row) {
	fmt.Fprintf(out, "%s\n", title)
	tw := newTable(out, "  CONTENDER\tLOGICAL CALLS\tREQUESTS\tAMPLIFICATION\tTARGET\tSECONDS")
	for _, r := range rows {
		target := targetCell(r.Target > 0, fmt.Sprintf("<= %.2f", r.Target), r.Amplification <= r.Target)
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%.2f\t%s\t%.1f\n", r.Contender, r.LogicalCalls, r.Requests, r.Amplification, target, r.Seconds)
	}
	tw.Flush()
}
