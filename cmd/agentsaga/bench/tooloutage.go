package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// ToolOutageConfig sizes the single-tool outage: Runs agent runs start at
// once, each making one call to one tool, which is down for its first
// Outage, shorter than the runs' escalate.after_breaker_open_seconds (the
// default, 300 s). Before calls were parked, such an outage escalated a run
// at its breaker's first refusal: 15 of 20 runs asked a human.
type ToolOutageConfig struct {
	Runs   int           `json:"runs"`
	Outage time.Duration `json:"outage"`
}

// DefaultToolOutage is the case: 20 calls against a tool that is
// down for 20 s.
var DefaultToolOutage = ToolOutageConfig{Runs: 20, Outage: 20 * time.Second}

// ToolOutageResult is what the single-tool outage did to the runs.
type ToolOutageResult struct {
	Config           ToolOutageConfig `json:"config"`
	ThresholdSeconds int              `json:"threshold_seconds"`
	// Escalations counts the runs that asked a human (seen escalated in
	// the ledger, then ended by the harness, which has no human).
	Escalations int `json:"escalations"`
	Completed   int `json:"completed"`
	// Requests is what the tool received, its 503s included.
	Requests int `json:"requests"`
	Failures int `json:"failures"`
	// LongestRunSeconds is the slowest run's time from start to result.
	LongestRunSeconds float64 `json:"longest_run_seconds"`
}

// toolOutageRunSeconds is the runs' deadline: long enough that waiting out
// the outage is affordable, short enough that an escalated run the harness
// failed to see would still end.
const toolOutageRunSeconds = 180

// ToolOutage runs cfg.Runs AgentRun workflows, on a worker with the default
// breaker and parking, against one tool that is down for cfg.Outage, and
// counts the runs that escalated.
func ToolOutage(ctx context.Context, c client.Client, databaseURL string, cfg ToolOutageConfig) (ToolOutageResult, error) {
	if cfg.Runs < 1 || cfg.Outage <= 0 {
		return ToolOutageResult{}, fmt.Errorf("bench: tool outage: runs %d and outage %v must be positive", cfg.Runs, cfg.Outage)
	}
	result := ToolOutageResult{Config: cfg, ThresholdSeconds: workflows.DefaultBreakerOpenEscalation}
	env, err := startOutageWorker(ctx, c, databaseURL, "bench-tool-outage-")
	if err != nil {
		return result, fmt.Errorf("bench: tool outage: %w", err)
	}
	defer env.close()
	down, err := StartDownstream(Faults{Outages: []Window{{From: 0, To: cfg.Outage}}}, 1)
	if err != nil {
		return result, err
	}
	defer down.Close()
	// A tool name of its own: the breaker (tool:NAME) lives in the ledger.
	tool := "crm_" + nonce()
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: update the CRM
budget: {steps: 4, seconds: %d}
model:
  provider: scripted
  script:
    - tool_calls: [{name: %s, arguments: {field: a}}]
    - content: updated
tools:
  - {name: %s, kind: http, url: %q}
`, toolOutageRunSeconds, tool, tool, down.URL())))
	if err != nil {
		return result, err
	}

	started := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, cfg.Runs)
	for i := range cfg.Runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := env.run(ctx, fmt.Sprintf("%s-%d", env.queue, i), spec)
			mu.Lock()
			defer mu.Unlock()
			result.LongestRunSeconds = max(result.LongestRunSeconds, run.ended.Sub(started).Seconds())
			switch {
			case run.escalated:
				result.Escalations++
			case run.err != nil:
				errs[i] = fmt.Errorf("bench: tool outage: run %d: %w", i, run.err)
			case run.result.Status == agentsagatype.RunCompleted:
				result.Completed++
			default:
				errs[i] = fmt.Errorf("bench: tool outage: run %d ended %s: %s", i, run.result.Status, run.result.Reason)
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return result, fmt.Errorf("bench: tool outage: %w", err)
	}
	for _, err := range errs {
		if err != nil {
			return result, err
		}
	}
	counts := down.Counts()
	result.Requests, result.Failures = counts.Requests, counts.Failures
	return result, nil
}

// outageWorker is what the outage scenarios run their AgentRun runs on: a
// ledger and an agentsaga worker with the default breaker and parking, on a
// task queue (and fleet bucket) of their own, so that no other scenario's
// retries spend from it.
type outageWorker struct {
	client client.Client
	store  *ledgerdb.Store
	queue  string
	close  func()
}

func startOutageWorker(ctx context.Context, c client.Client, databaseURL, queuePrefix string) (*outageWorker, error) {
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	queue := queuePrefix + nonce()
	w, err := startEngineWorker(ctx, c, store, queue, queue)
	if err != nil {
		store.Close()
		return nil, err
	}
	return &outageWorker{client: c, store: ledgerdb.Of(store), queue: queue, close: func() { w.Stop(); store.Close() }}, nil
}

// watchedRun is how one AgentRun run of an outage scenario ended.
type watchedRun struct {
	result workflows.RunResult
	// err is the run's error: it did not start, or did not return a
	// result (an escalated run's termination included).
	err error
	// escalated says the run asked a human: seen escalated in the
	// ledger, then ended by the harness.
	escalated bool
	// started and ended bound the run, from its start to its result.
	started, ended time.Time
}

// run runs spec as run id and waits for its result. An escalated run
// waits for a human; the harness has none, so it counts the run escalated
// and terminates it, so that the scenario ends too.
func (o *outageWorker) run(ctx context.Context, id string, spec workflows.RunSpec) watchedRun {
	out := watchedRun{started: time.Now()}
	run, err := startAgentRun(o.client, o.queue, spec)(ctx, id)
	if err != nil {
		out.err, out.ended = fmt.Errorf("start: %w", err), time.Now()
		return out
	}
	done := make(chan struct{})
	watched := make(chan bool, 1)
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				watched <- false
				return
			case <-ctx.Done():
				watched <- false
				return
			case <-tick.C:
			}
			if stored, err := o.store.GetRun(ctx, id); err == nil && stored.Status == agentsagatype.RunEscalated {
				watched <- true
				_ = o.client.TerminateWorkflow(ctx, id, "", "bench: escalated; the harness has no human")
				return
			}
		}
	}()
	out.err = run.Get(ctx, &out.result)
	out.ended = time.Now()
	close(done)
	out.escalated = <-watched
	return out
}

// PrintToolOutage writes the single-tool outage's table.
func PrintToolOutage(out io.Writer, title string, r ToolOutageResult) {
	fmt.Fprintf(out, "%s\n", title)
	tw := newTable(out, "  RUNS\tCALLS\tOUTAGE\tESCALATE AFTER\tESCALATIONS\tCOMPLETED\tREQUESTS\tFAILED REQUESTS\tLONGEST RUN\tTARGET")
	verdict := "met"
	if r.Escalations > 0 {
		verdict = "MISSED"
	}
	fmt.Fprintf(tw, "  %d\t%d\t%v\t%d s\t%d\t%d\t%d\t%d\t%.1f s\t0 escalations (%s)\n", r.Config.Runs, r.Config.Runs, r.Config.Outage,
		r.ThresholdSeconds, r.Escalations, r.Completed, r.Requests, r.Failures, r.LongestRunSeconds, verdict)
	tw.Flush()
}
