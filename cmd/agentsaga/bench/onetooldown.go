package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/workflows"
)

// OneToolDownConfig sizes the smallest outage there is, as a new user meets
// it: ONE AgentRun run whose model fetches Items items one after another
// (a turn each, one tool call each, then a final answer) from ONE HTTP tool
// that answers 503 for its first Outage, measured from its first request,
// and 200 after. No other run shares the breaker, so what the run does is
// what its own failures tell it.
type OneToolDownConfig struct {
	Items  int           `json:"items"`
	Outage time.Duration `json:"outage"`
}

// DefaultOneToolDown is issue 20's case: twenty fetches, the tool down for
// its first 20 s.
var DefaultOneToolDown = OneToolDownConfig{Items: 20, Outage: 20 * time.Second}

// oneToolDownRetry is the run's retry block, as the user wrote it:
// retry: {max_attempts: 3, ratio: 0.2, floor: 5}. The breaker is the
// worker's default (budget.DefaultBreaker), as a user's would be.
var oneToolDownRetry = budget.RetryPolicy{MaxAttempts: 3, Ratio: 0.2, Floor: 5}

// OneToolDownResult is what the outage did to the run.
type OneToolDownResult struct {
	Config  OneToolDownConfig    `json:"config"`
	Retry   budget.RetryPolicy   `json:"retry"`
	Breaker budget.BreakerConfig `json:"breaker"`
	// Status is the run's (completed, partial, failed, ...), or
	// "escalated" for a run that asked a human (the harness, having
	// none, ended it); Reason is the run's own account.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Seconds is the time to completion: from the run's start to its
	// result.
	Seconds float64 `json:"seconds"`
	// ItemsFetched counts the items the tool answered 200 for, each once.
	ItemsFetched int `json:"items_fetched"`
	// Requests is every request the tool received; OutageRequests those
	// it received during the outage (its only 503s).
	Requests       int `json:"requests"`
	OutageRequests int `json:"outage_requests"`
	// FirstFailures are the outage requests of the first call's first
	// send, its attempts 1, 2, 3...: the failures that tell the breaker
	// the tool is down. Probes are the outage requests after them: the
	// breaker's probes while the run waits behind it (or, were the run to
	// go on calling instead, its later calls' attempts).
	FirstFailures int `json:"first_failures"`
	Probes        int `json:"probes"`
	Escalations   int `json:"escalations"`
}

// OneToolDownRequestBound is the most requests the outage should see: the
// first call's attempts, then a probe per cooldown of the outage, with two
// to spare for the probes that straddle its start and end.
func OneToolDownRequestBound(cfg OneToolDownConfig) int {
	return oneToolDownRetry.MaxAttempts + int(cfg.Outage/budget.DefaultBreaker.Cooldown) + 2
}

// OneToolDown runs the one-run outage: its AgentRun run on a worker of its
// own with the default breaker, watched for escalation as ToolOutage's runs
// are, against an itemTool down for cfg.Outage from its first request.
func OneToolDown(ctx context.Context, c client.Client, databaseURL string, cfg OneToolDownConfig) (OneToolDownResult, error) {
	if cfg.Items < 1 || cfg.Outage <= 0 {
		return OneToolDownResult{}, fmt.Errorf("bench: one tool down: items %d and outage %v must be positive", cfg.Items, cfg.Outage)
	}
	result := OneToolDownResult{Config: cfg, Retry: oneToolDownRetry, Breaker: budget.DefaultBreaker}
	env, err := startOutageWorker(ctx, c, databaseURL, "bench-one-tool-down-")
	if err != nil {
		return result, fmt.Errorf("bench: one tool down: %w", err)
	}
	defer env.close()
	var tool *itemTool
	down, err := serveDownstream("127.0.0.1:0", Faults{Outages: []Window{{From: 0, To: cfg.Outage}}, OutagesFromFirstRequest: true}, 1,
		func(d *Downstream) http.Handler { tool = &itemTool{down: d}; return tool })
	if err != nil {
		return result, err
	}
	defer down.Close()
	spec, err := workflows.ParseSpec([]byte(oneToolDownSpec(cfg, "fetch_"+nonce(), down.URL())))
	if err != nil {
		return result, err
	}

	run := env.run(ctx, env.queue+"-run", spec)
	if err := ctx.Err(); err != nil {
		return result, fmt.Errorf("bench: one tool down: %w", err)
	}
	switch {
	case run.escalated:
		result.Status, result.Escalations = "escalated", 1
	case run.err != nil:
		return result, fmt.Errorf("bench: one tool down: %w", run.err)
	default:
		result.Status, result.Reason = run.result.Status, run.result.Reason
	}
	result.Seconds = run.ended.Sub(run.started).Seconds()
	counts := down.Counts()
	result.Requests, result.OutageRequests = counts.Requests, counts.Failures
	result.ItemsFetched, result.FirstFailures = tool.figures()
	result.Probes = result.OutageRequests - result.FirstFailures
	return result, nil
}

// oneToolDownSpec is the run's spec as a user would write it. The tool's
// name has a nonce because its breaker (tool:NAME) lives in the ledger,
// which outlives one bench: a breaker another bench left open must not
// stand in for this outage. The budget leaves room for the outage and the
// fetches after it: the steps are twice the turns, so the last turn comes
// well before finish_at (0.2 of the budget left) would cut the run short,
// and the seconds are ToolOutage's runs' plus the outage.
func oneToolDownSpec(cfg OneToolDownConfig, tool, url string) string {
	var script strings.Builder
	for item := 1; item <= cfg.Items; item++ {
		fmt.Fprintf(&script, "    - tool_calls: [{name: %s, arguments: {item: %d}}]\n", tool, item)
	}
	fmt.Fprintf(&script, "    - content: fetched %d items\n", cfg.Items)
	return fmt.Sprintf(`
goal: fetch %d items, one after another
budget: {steps: %d, seconds: %d}
retry: {max_attempts: %d, ratio: %g, floor: %d}
model:
  provider: scripted
  script:
%stools:
  - {name: %s, kind: http, url: %q}
`, cfg.Items, 2*(cfg.Items+1), toolOutageRunSeconds+int(cfg.Outage.Seconds()),
		oneToolDownRetry.MaxAttempts, oneToolDownRetry.Ratio, oneToolDownRetry.Floor, script.String(), tool, url)
}

// itemTool is the one-run outage's tool. The downstream decides whether a
// request fails, and counts it; a request it serves is answered with the
// item asked for, because the watchdog ends a run whose turns learn nothing
// new, and twenty identical answers would be that. It logs each request,
// to count the items fetched and to tell the first failures from the
// probes.
type itemTool struct {
	down *Downstream
	mu   sync.Mutex
	log  []itemRequest
}

type itemRequest struct {
	key     string
	attempt int
	item    int
	ok      bool
}

func (t *itemTool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == CountsPath {
		t.down.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	var args struct {
		Item int `json:"item"`
	}
	_ = json.Unmarshal(body, &args)
	answer := httptest.NewRecorder()
	t.down.ServeHTTP(answer, r)
	attempt, _ := strconv.Atoi(r.Header.Get(AttemptHeader))
	t.mu.Lock()
	t.log = append(t.log, itemRequest{key: r.Header.Get("Idempotency-Key"), attempt: attempt, item: args.Item, ok: answer.Code == http.StatusOK})
	t.mu.Unlock()
	if answer.Code != http.StatusOK {
		for name, values := range answer.Header() {
			w.Header()[name] = values
		}
		w.WriteHeader(answer.Code)
		_, _ = w.Write(answer.Body.Bytes())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"item":%d,"ok":true}`, args.Item)
}

// figures counts the distinct items answered 200, and the first failures:
// the failed requests at the head of the log that are the first call's
// first send, the same key with attempts 1, 2, 3... (a send after a wait
// behind the breaker is a new activity, which starts again at attempt 1).
func (t *itemTool) figures() (items, firstFailures int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fetched := map[int]bool{}
	for _, r := range t.log {
		if r.ok {
			fetched[r.item] = true
		}
	}
	for i, r := range t.log {
		if r.ok || r.key != t.log[0].key || r.attempt != i+1 {
			break
		}
		firstFailures++
	}
	return len(fetched), firstFailures
}

// PrintOneToolDown writes the one-run outage's row and, for a run that did
// not complete, why.
func PrintOneToolDown(out io.Writer, title string, r OneToolDownResult) {
	fmt.Fprintf(out, "%s\n", title)
	fmt.Fprintf(out, "  %d fetches one after another; retry {max_attempts: %d, ratio: %g, floor: %d}; the default breaker (opens after %d failures, probes every %v)\n",
		r.Config.Items, r.Retry.MaxAttempts, r.Retry.Ratio, r.Retry.Floor, r.Breaker.Threshold, r.Breaker.Cooldown)
	tw := newTable(out, "  STATUS\tTIME TO COMPLETION\tITEMS FETCHED\tREQUESTS\tDURING THE OUTAGE\tFIRST FAILURES\tPROBES\tESCALATIONS\tTARGET")
	bound := OneToolDownRequestBound(r.Config)
	verdict := "met"
	if r.Status != agentsagatype.RunCompleted || r.ItemsFetched != r.Config.Items || r.Escalations > 0 || r.OutageRequests > bound {
		verdict = "MISSED"
	}
	fmt.Fprintf(tw, "  %s\t%.1f s\t%d of %d\t%d\t%d\t%d\t%d\t%d\tcompleted, %d of %d, 0 escalations, <= %d requests in the outage (%s)\n",
		r.Status, r.Seconds, r.ItemsFetched, r.Config.Items, r.Requests, r.OutageRequests, r.FirstFailures, r.Probes, r.Escalations,
		r.Config.Items, r.Config.Items, bound, verdict)
	tw.Flush()
	if r.Status != agentsagatype.RunCompleted && r.Reason != "" {
		fmt.Fprintf(out, "  the run ended %s: %s\n", r.Status, r.Reason)
	}
}
