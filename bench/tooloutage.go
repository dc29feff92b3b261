package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
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
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		return result, err
	}
	defer store.Close()
	queue := "bench-tool-outage-" + nonce()
	w, err := worker.New(ctx, c, store, worker.Options{TaskQueue: queue, Bucket: queue})
	if err != nil {
		return result, err
	}
	if err := w.Start(); err != nil {
		return result, fmt.Errorf("bench: tool outage: start worker: %w", err)
	}
	defer w.Stop()
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
	escalated := make([]bool, cfg.Runs)
	for i := range cfg.Runs {
		id := fmt.Sprintf("%s-%d", queue, i)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
		if err != nil {
			return result, fmt.Errorf("bench: tool outage: start run %d: %w", i, err)
		}
		done := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer close(done)
			var r workflows.RunResult
			err := run.Get(ctx, &r)
			mu.Lock()
			defer mu.Unlock()
			result.LongestRunSeconds = max(result.LongestRunSeconds, time.Since(started).Seconds())
			switch {
			case escalated[i]: // counted, and terminated
			case err != nil:
				errs[i] = fmt.Errorf("bench: tool outage: run %d: %w", i, err)
			case r.Status == ledger.RunCompleted:
				result.Completed++
			default:
				errs[i] = fmt.Errorf("bench: tool outage: run %d ended %s: %s", i, r.Status, r.Reason)
			}
		}()
		// An escalated run waits for a human; the harness counts it and
		// ends it, so that the scenario ends too.
		go func() {
			defer wg.Done()
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if stored, err := store.GetRun(ctx, id); err == nil && stored.Status == ledger.RunEscalated {
					mu.Lock()
					result.Escalations++
					escalated[i] = true
					mu.Unlock()
					_ = c.TerminateWorkflow(ctx, id, "", "bench: tool outage: escalated; the harness has no human")
					return
				}
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

// PrintToolOutage writes the single-tool outage's table.
func PrintToolOutage(out io.Writer, title string, r ToolOutageResult) {
	fmt.Fprintf(out, "%s\n", title)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  RUNS\tCALLS\tOUTAGE\tESCALATE AFTER\tESCALATIONS\tCOMPLETED\tREQUESTS\tFAILED REQUESTS\tLONGEST RUN\tTARGET")
	verdict := "met"
	if r.Escalations > 0 {
		verdict = "MISSED"
	}
	fmt.Fprintf(tw, "  %d\t%d\t%v\t%d s\t%d\t%d\t%d\t%d\t%.1f s\t0 escalations (%s)\n", r.Config.Runs, r.Config.Runs, r.Config.Outage,
		r.ThresholdSeconds, r.Escalations, r.Completed, r.Requests, r.Failures, r.LongestRunSeconds, verdict)
	tw.Flush()
}
