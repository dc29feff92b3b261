package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tiktoken-go/tokenizer"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// LongConfig sizes the long-run scenario (issue 12, item 7): one run per
// entry of Turns, each turn one call of an HTTP tool whose answer is
// OutputBytes of text, asked for by an OpenAI-compatible model on loopback
// that stops calling the tool once Turns results have come back.
type LongConfig struct {
	Turns       []int `json:"turns"`
	OutputBytes int   `json:"output_bytes"`
	// ContextTokens, when positive, is written into the spec as
	// model.context_tokens; zero leaves the field out (today's engine has
	// no such field and rejects it).
	ContextTokens int `json:"context_tokens,omitempty"`
	// PerTurnTimeout bounds a run at 2 minutes plus this much a turn; a run
	// still going then is terminated by the bench and reported as stalled.
	PerTurnTimeout time.Duration `json:"per_turn_timeout"`
	// Progress, when set, gets a line as each run ends.
	Progress io.Writer `json:"-"`
}

// DefaultLong is the scenario: 10, 100 and 1,000 turns of 50 KiB.
var DefaultLong = LongConfig{Turns: []int{10, 100, 1000}, OutputBytes: 50 << 10, PerTurnTimeout: 3 * time.Second}

// The targets.
const (
	longMaxPayload       = 256 << 10 // Temporal's payload warning threshold
	longMaxBytesPerTurn  = 8 << 10
	longMaxBytesRatio    = 1.2
	longMaxEngineRatio   = 1.5 // "flat": the issue gives no number; this bench's bound
	longToolName         = "fetch_page"
	longModelName        = "bench-long-model"
	longCompletionTokens = 20
)

// LongRow is one run of the long scenario. History figures are summed over
// every execution of the run's continue-as-new chain.
type LongRow struct {
	Turns int `json:"turns"`
	// TurnsDone is how many turns' tool results the tool server served.
	TurnsDone int `json:"turns_done"`
	// Outcome is "completed", "terminated after N turns" (N tool results
	// had come back), "failed after N turns: ...", "stalled after N turns
	// (bench timeout)", or the run's status.
	Outcome string `json:"outcome"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	// LedgerStatus is what the ledger says of the run afterwards.
	LedgerStatus string `json:"ledger_status"`
	// Executions is the length of the continue-as-new chain.
	Executions int `json:"executions"`
	// HistoryBytes is the sum of proto.Size of every event;
	// ServerHistoryBytes the sum of what the server reports.
	HistoryBytes       int64   `json:"history_bytes"`
	ServerHistoryBytes int64   `json:"server_history_bytes"`
	HistoryEvents      int     `json:"history_events"`
	BytesPerTurn       float64 `json:"bytes_per_turn"`
	// LargestPayload is the longest Payload data in any event, and where.
	LargestPayload   int    `json:"largest_payload_bytes"`
	LargestPayloadIn string `json:"largest_payload_in,omitempty"`
	// Model requests as the model server received them; tokens are
	// counted with the o200k tokenizer (requestTokens).
	ModelRequests          int `json:"model_requests"`
	LargestRequestBytes    int `json:"largest_request_bytes"`
	LargestRequestTokens   int `json:"largest_request_tokens"`
	LargestRequestMessages int `json:"largest_request_messages"`
	ContextTokens          int `json:"context_tokens,omitempty"`
	// RequestsOverBudget counts model requests above ContextTokens.
	RequestsOverBudget int `json:"requests_over_budget"`
	// ConversationGaps counts model requests that showed fewer finished
	// turns than the tool server had served: the engine dropped turns
	// from the conversation without a trace of them.
	ConversationGaps int `json:"conversation_gaps"`
	// Seconds is the wall time of the run; ModelSeconds and ToolSeconds
	// the servers' own time inside it.
	Seconds         float64 `json:"seconds"`
	ModelSeconds    float64 `json:"model_seconds"`
	ToolSeconds     float64 `json:"tool_seconds"`
	EngineMsPerTurn float64 `json:"engine_ms_per_turn"`
	// EngineMsFirstTenth and EngineMsLastTenth are the mean engine time
	// of the first and last tenth of the run's turns (turn 1 left out).
	EngineMsFirstTenth float64 `json:"engine_ms_first_tenth"`
	EngineMsLastTenth  float64 `json:"engine_ms_last_tenth"`
	// Series is turn by turn: history so far, that turn's model request,
	// that turn's engine time.
	Series []LongPoint `json:"series"`
}

// LongPoint is one turn of a run. HistoryBytes counts the events written
// until the tool server answered the turn's call.
type LongPoint struct {
	Turn          int     `json:"turn"`
	HistoryBytes  int64   `json:"history_bytes"`
	RequestTokens int     `json:"request_tokens"`
	EngineMs      float64 `json:"engine_ms"`
}

// LongTarget is one of the targets, judged on the rows.
type LongTarget struct {
	Target  string `json:"target"`
	Figure  string `json:"figure"`
	Verdict string `json:"verdict"` // "met", "MISSED" or "n/a"
}

// LongSpec is the run spec of one long run, as YAML text. contextTokens
// is written as model.context_tokens only when positive.
func LongSpec(turns int, modelURL, toolURL string, contextTokens int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "goal: %q\n", fmt.Sprintf("Read the report's pages 1 to %d with %s, one page a turn, then say that you are done.", turns, longToolName))
	// Steps to spare, and a finish_at low enough that the graceful finish
	// never starts before the last turn: the default 0.2 would stop a
	// 1,000-turn run at turn ~800.
	fmt.Fprintf(&b, "budget: {steps: %d}\nfinish_at: 0.01\n", 2*turns+10)
	fmt.Fprintf(&b, "model:\n  provider: openai\n  name: %s\n  base_url: %q\n", longModelName, modelURL)
	if contextTokens > 0 {
		fmt.Fprintf(&b, "  context_tokens: %d\n", contextTokens)
	}
	fmt.Fprintf(&b, `tools:
  - name: %s
    kind: http
    url: %q
    description: Returns one page of the report as text.
    timeout_seconds: 60
    parameters: {type: object, properties: {turn: {type: integer, minimum: 1}}, required: [turn]}
`, longToolName, toolURL)
	return b.String()
}

// Long runs the long scenario: one run per length, one after another, each
// with its own model server, tool server, task queue and worker.
func Long(ctx context.Context, c client.Client, databaseURL string, cfg LongConfig) ([]LongRow, error) {
	if len(cfg.Turns) == 0 || cfg.OutputBytes < 64 {
		return nil, fmt.Errorf("bench: long: want at least one length and outputs of at least 64 bytes (turns %v, output %d bytes)", cfg.Turns, cfg.OutputBytes)
	}
	for _, n := range cfg.Turns {
		if n < 1 {
			return nil, fmt.Errorf("bench: long: %d turns: a run needs at least one", n)
		}
	}
	if cfg.PerTurnTimeout <= 0 {
		cfg.PerTurnTimeout = DefaultLong.PerTurnTimeout
	}
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	var rows []LongRow
	for _, turns := range cfg.Turns {
		row, err := longOne(ctx, c, store, cfg, turns)
		if err != nil {
			return nil, err
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "long: %d turns: %s in %.1f s\n", turns, row.Outcome, row.Seconds)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func longOne(ctx context.Context, c client.Client, store *ledger.Store, cfg LongConfig, turns int) (LongRow, error) {
	row := LongRow{Turns: turns, ContextTokens: cfg.ContextTokens}
	tool, err := startLongTool(turns, cfg.OutputBytes)
	if err != nil {
		return row, err
	}
	defer tool.Close()
	model, err := startLongModel(turns, tool)
	if err != nil {
		return row, err
	}
	defer model.Close()
	spec, err := workflows.ParseSpec([]byte(LongSpec(turns, model.URL()+"/v1", tool.URL()+"/page", cfg.ContextTokens)))
	if err != nil {
		if cfg.ContextTokens > 0 && strings.Contains(err.Error(), "context_tokens") {
			return row, fmt.Errorf("bench: long: this engine's spec has no model.context_tokens yet (%w); run without --context-tokens", err)
		}
		return row, fmt.Errorf("bench: long: %w", err)
	}

	queue := fmt.Sprintf("bench-long-%d-%s", turns, nonce())
	w, err := startEngineWorker(ctx, c, store, queue, queue)
	if err != nil {
		return row, fmt.Errorf("bench: long: %w", err)
	}
	defer w.Stop()

	limit := 2*time.Minute + time.Duration(turns)*cfg.PerTurnTimeout
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	began := time.Now()
	run, err := startAgentRun(c, queue, spec)(runCtx, queue)
	if err != nil {
		return row, fmt.Errorf("bench: long: start run: %w", err)
	}
	// Taken now: once Get has followed the run across continue-as-new,
	// GetRunID names the last execution, not the first.
	firstRunID := run.GetRunID()
	var result struct {
		Status string `json:"status"`
		Reason string `json:"reason"`
	}
	runErr := run.Get(runCtx, &result)
	ended := time.Now()
	row.Seconds = ended.Sub(began).Seconds()
	stalled := false
	if runErr != nil && runCtx.Err() != nil {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		// The run outlived its allowance: stop it, and say so.
		stalled = true
		tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
		_ = c.TerminateWorkflow(tctx, queue, "", fmt.Sprintf("bench long: the run did not end within %s", limit))
		tcancel()
	}

	hctx, hcancel := context.WithTimeout(ctx, 5*time.Minute)
	defer hcancel()
	chain, err := readChain(hctx, c, queue, firstRunID)
	if err != nil {
		return row, fmt.Errorf("bench: long: history of %s: %w", queue, err)
	}
	row.Executions, row.HistoryBytes, row.ServerHistoryBytes, row.HistoryEvents = chain.executions, chain.bytes, chain.serverBytes, chain.events
	row.LargestPayload, row.LargestPayloadIn = chain.largest, chain.largestIn
	if got, err := ledgerdb.Of(store).GetRun(hctx, queue); err == nil {
		row.LedgerStatus = got.Status
	} else {
		row.LedgerStatus = "unknown: " + err.Error()
	}

	served := tool.served()
	row.TurnsDone = len(served)
	after := fmt.Sprintf("after %d turns", row.TurnsDone)
	var terminated *temporal.TerminatedError
	var timedOut *temporal.TimeoutError
	var appErr *temporal.ApplicationError
	switch {
	case stalled:
		row.Status, row.Outcome = "stalled", "stalled "+after+" (bench timeout)"
	case runErr == nil:
		row.Status, row.Reason, row.Outcome = result.Status, result.Reason, result.Status
		if row.TurnsDone < turns {
			row.Outcome = fmt.Sprintf("%s after %d of %d turns", result.Status, row.TurnsDone, turns)
		}
	case errors.As(runErr, &terminated):
		row.Status, row.Reason = "terminated", chain.ending
		row.Outcome = "terminated " + after
	case errors.As(runErr, &timedOut):
		row.Status, row.Reason = "timed out", runErr.Error()
		row.Outcome = "timed out " + after
	case errors.As(runErr, &appErr):
		row.Status, row.Reason = "failed", appErr.Error()
		row.Outcome = "failed " + after + ": " + clipText(appErr.Error(), 60)
	default:
		row.Status, row.Reason = "error", runErr.Error()
		row.Outcome = "error " + after + ": " + clipText(runErr.Error(), 60)
	}

	requests := model.log()
	row.ModelRequests = len(requests)
	for _, r := range requests {
		row.ModelSeconds += r.seconds
		if r.bytes > row.LargestRequestBytes {
			row.LargestRequestBytes, row.LargestRequestTokens, row.LargestRequestMessages = r.bytes, r.tokens, r.messages
		}
		if cfg.ContextTokens > 0 && r.tokens > cfg.ContextTokens {
			row.RequestsOverBudget++
		}
		if r.gap {
			row.ConversationGaps++
		}
	}
	row.ToolSeconds = tool.seconds()
	engine := row.Seconds - row.ModelSeconds - row.ToolSeconds
	row.EngineMsPerTurn = 1000 * engine / float64(max(row.TurnsDone, 1))
	row.BytesPerTurn = float64(row.HistoryBytes) / float64(max(row.TurnsDone, 1))
	row.Series = longSeries(requests, served, chain.times, chain.sizes, ended)
	row.EngineMsFirstTenth, row.EngineMsLastTenth = tenths(row.Series)
	return row, nil
}

// longSeries puts the run's figures turn by turn. A turn's engine time is
// from the first model request of the turn to the first of the next (or
// the run's end), less the model server's and the tool server's time in it.
func longSeries(requests []longRequest, served map[int]longServed, eventTimes []time.Time, eventSizes []int64, ended time.Time) []LongPoint {
	first := map[int]time.Time{}
	modelSeconds := map[int]float64{}
	tokens := map[int]int{}
	for _, r := range requests {
		if t, ok := first[r.turn]; !ok || r.at.Before(t) {
			first[r.turn] = r.at
		}
		modelSeconds[r.turn] += r.seconds
		tokens[r.turn] = max(tokens[r.turn], r.tokens)
	}
	turns := make([]int, 0, len(served))
	for t := range served {
		turns = append(turns, t)
	}
	slices.Sort(turns)
	var points []LongPoint
	var cumulative int64
	next := 0
	for _, t := range turns {
		boundary := served[t].at
		for next < len(eventTimes) && !eventTimes[next].After(boundary) {
			cumulative += eventSizes[next]
			next++
		}
		p := LongPoint{Turn: t, HistoryBytes: cumulative, RequestTokens: tokens[t]}
		if start, ok := first[t]; ok {
			end, ok := first[t+1]
			if !ok {
				end = ended
			}
			p.EngineMs = 1000 * (end.Sub(start).Seconds() - modelSeconds[t] - served[t].seconds)
		}
		points = append(points, p)
	}
	return points
}

// tenths is the mean engine time of the first and the last tenth of the
// turns (at least one turn each), leaving turn 1 out: it pays for the
// worker's first poll.
func tenths(series []LongPoint) (first, last float64) {
	if len(series) < 3 {
		return 0, 0
	}
	s := series[1:]
	n := max(len(s)/10, 1)
	mean := func(ps []LongPoint) float64 {
		total := 0.0
		for _, p := range ps {
			total += p.EngineMs
		}
		return total / float64(len(ps))
	}
	return mean(s[:n]), mean(s[len(s)-n:])
}

// chain is what the histories of a continue-as-new chain hold.
type chain struct {
	executions  int
	bytes       int64
	serverBytes int64
	events      int
	largest     int
	largestIn   string
	// ending says why the last execution ended, when it did not complete.
	ending string
	times  []time.Time
	sizes  []int64
}

// readChain reads every event of every execution of workflowID from runID
// on, following ContinuedAsNew events to the next execution.
func readChain(ctx context.Context, c client.Client, workflowID, runID string) (chain, error) {
	var ch chain
	for runID != "" && ch.executions < 10000 {
		ch.executions++
		next := ""
		lastTaskFailure := ""
		iter := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		scheduled := map[int64]string{}
		for iter.HasNext() {
			event, err := iter.Next()
			if err != nil {
				return ch, err
			}
			size := int64(proto.Size(event))
			ch.events++
			ch.bytes += size
			ch.times = append(ch.times, event.GetEventTime().AsTime())
			ch.sizes = append(ch.sizes, size)
			if a := event.GetActivityTaskScheduledEventAttributes(); a != nil {
				scheduled[event.GetEventId()] = a.GetActivityType().GetName()
			}
			if p := largestPayload(event.ProtoReflect()); p > ch.largest {
				ch.largest, ch.largestIn = p, eventName(event, scheduled)
			}
			switch {
			case event.GetWorkflowExecutionContinuedAsNewEventAttributes() != nil:
				next = event.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
			case event.GetWorkflowTaskFailedEventAttributes() != nil:
				a := event.GetWorkflowTaskFailedEventAttributes()
				lastTaskFailure = strings.TrimPrefix(a.GetCause().String(), "WORKFLOW_TASK_FAILED_CAUSE_") + ": " + a.GetFailure().GetMessage()
			case event.GetWorkflowExecutionTerminatedEventAttributes() != nil:
				reason := event.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
				ch.ending = "terminated: " + reason
				if _, message, _ := strings.Cut(lastTaskFailure, ": "); lastTaskFailure != "" && !strings.Contains(reason, message) {
					ch.ending += " (last workflow task failure: " + lastTaskFailure + ")"
				}
			}
		}
		if d, err := c.DescribeWorkflowExecution(ctx, workflowID, runID); err == nil {
			ch.serverBytes += d.GetWorkflowExecutionInfo().GetHistorySizeBytes()
		}
		runID = next
	}
	return ch, nil
}

// eventName says where a payload was: the event type, and for activity
// events the activity's type.
func eventName(event *historypb.HistoryEvent, scheduled map[int64]string) string {
	name := event.GetEventType().String() // e.g. ActivityTaskScheduled
	var activity string
	switch {
	case event.GetActivityTaskScheduledEventAttributes() != nil:
		activity = event.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
	case event.GetActivityTaskCompletedEventAttributes() != nil:
		activity = scheduled[event.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]
	}
	if activity != "" {
		name += " " + activity
	}
	return name
}

// largestPayload is the longest Payload data anywhere in m.
func largestPayload(m protoreflect.Message) int {
	if p, ok := m.Interface().(*commonpb.Payload); ok {
		return len(p.GetData())
	}
	best := 0
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			if fd.Message() != nil {
				list := v.List()
				for i := range list.Len() {
					best = max(best, largestPayload(list.Get(i).Message()))
				}
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, value protoreflect.Value) bool {
					best = max(best, largestPayload(value.Message()))
					return true
				})
			}
		case fd.Message() != nil:
			best = max(best, largestPayload(v.Message()))
		}
		return true
	})
	return best
}

// LongTargets judges the targets on rows: the longest length
// against the shortest.
func LongTargets(cfg LongConfig, rows []LongRow) []LongTarget {
	if len(rows) == 0 {
		return nil
	}
	shortest, longest := rows[0], rows[0]
	for _, r := range rows {
		if r.Turns < shortest.Turns {
			shortest = r
		}
		if r.Turns > longest.Turns {
			longest = r
		}
	}
	verdict := func(met bool) string {
		if met {
			return "met"
		}
		return "MISSED"
	}
	var targets []LongTarget
	targets = append(targets, LongTarget{
		Target: fmt.Sprintf("the %s-turn run completes", thousands(longest.Turns)),
		Figure: longest.Outcome, Verdict: verdict(longest.Status == agentsagatype.RunCompleted && longest.TurnsDone == longest.Turns)})
	if len(rows) > 1 && shortest.Turns != longest.Turns {
		ratio := longest.BytesPerTurn / shortest.BytesPerTurn
		targets = append(targets, LongTarget{
			Target: fmt.Sprintf("bytes/turn at %s <= %.1f x at %s", thousands(longest.Turns), longMaxBytesRatio, thousands(shortest.Turns)),
			Figure: fmt.Sprintf("%s vs %s: %.2f x", byteSize(longest.BytesPerTurn), byteSize(shortest.BytesPerTurn), ratio), Verdict: verdict(ratio <= longMaxBytesRatio)})
	}
	targets = append(targets, LongTarget{
		Target: fmt.Sprintf("bytes/turn at %s <= 8 KiB", thousands(longest.Turns)),
		Figure: byteSize(longest.BytesPerTurn), Verdict: verdict(longest.BytesPerTurn <= longMaxBytesPerTurn)})
	biggest := rows[0]
	for _, r := range rows {
		if r.LargestPayload > biggest.LargestPayload {
			biggest = r
		}
	}
	targets = append(targets, LongTarget{
		Target:  "no payload in history > 256 KiB",
		Figure:  fmt.Sprintf("largest %s (%s turns, %s)", byteSize(float64(biggest.LargestPayload)), thousands(biggest.Turns), biggest.LargestPayloadIn),
		Verdict: verdict(biggest.LargestPayload <= longMaxPayload)})
	tokens := rows[0]
	over := 0
	for _, r := range rows {
		if r.LargestRequestTokens > tokens.LargestRequestTokens {
			tokens = r
		}
		over += r.RequestsOverBudget
	}
	if cfg.ContextTokens > 0 {
		targets = append(targets, LongTarget{
			Target:  fmt.Sprintf("no model request > the context budget (%s tokens)", thousands(cfg.ContextTokens)),
			Figure:  fmt.Sprintf("largest %s tokens (%s turns); %d requests over", thousands(tokens.LargestRequestTokens), thousands(tokens.Turns), over),
			Verdict: verdict(over == 0)})
	} else {
		targets = append(targets, LongTarget{
			Target:  "no model request > the context budget",
			Figure:  fmt.Sprintf("largest %s tokens (%s turns); no budget set (--context-tokens)", thousands(tokens.LargestRequestTokens), thousands(tokens.Turns)),
			Verdict: "n/a"})
	}
	// Flat is judged inside the longest run, its last tenth of turns
	// against its first, which one machine's noise from run to run does
	// not blur; the lengths side by side are in the figure too.
	flat := LongTarget{Target: fmt.Sprintf("engine time/turn flat: last tenth of the %s-turn run <= %.1f x its first", thousands(longest.Turns), longMaxEngineRatio),
		Figure: "too few turns to tell", Verdict: "n/a"}
	if longest.EngineMsFirstTenth > 0 {
		ratio := longest.EngineMsLastTenth / longest.EngineMsFirstTenth
		flat.Figure = fmt.Sprintf("%.0f ms vs %.0f ms: %.2f x", longest.EngineMsLastTenth, longest.EngineMsFirstTenth, ratio)
		flat.Verdict = verdict(ratio <= longMaxEngineRatio)
	}
	if len(rows) > 1 && shortest.Turns != longest.Turns {
		flat.Figure += fmt.Sprintf(" (whole runs: %.0f ms/turn at %s, %.0f at %s)", longest.EngineMsPerTurn, thousands(longest.Turns), shortest.EngineMsPerTurn, thousands(shortest.Turns))
	}
	targets = append(targets, flat)
	return targets
}

// PrintLong writes the long scenario's table and its targets.
func PrintLong(out io.Writer, title string, cfg LongConfig, rows []LongRow) {
	fmt.Fprintf(out, "%s\n", title)
	tw := newTable(out, "  TURNS\tOUTCOME\tLEDGER\tHISTORY\tEVENTS\tEXECUTIONS\tBYTES/TURN\tLARGEST PAYLOAD\tLARGEST REQUEST\tENGINE/TURN\tSECONDS")
	for _, r := range rows {
		request := thousands(r.LargestRequestTokens) + " tokens"
		if r.ContextTokens > 0 {
			request = fmt.Sprintf("%s / %s tokens", thousands(r.LargestRequestTokens), thousands(r.ContextTokens))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%.0f ms\t%.1f\n", thousands(r.Turns), r.Outcome, r.LedgerStatus,
			byteSize(float64(r.HistoryBytes)), thousands(r.HistoryEvents), r.Executions, byteSize(r.BytesPerTurn),
			byteSize(float64(r.LargestPayload)), request, r.EngineMsPerTurn, r.Seconds)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Status != agentsagatype.RunCompleted && r.Reason != "" {
			fmt.Fprintf(out, "  %s turns: %s\n", thousands(r.Turns), clipText(r.Reason, 300))
		}
	}
	printTargets(out, "targets (issue 12)", LongTargets(cfg, rows))
}

func byteSize(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.2f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// thousands writes n with commas: 1,000.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// longTool is the HTTP tool: POST {"turn": k} answers k's page, exactly
// size bytes of text that begin with "turn k of N" and differ per turn.
type longTool struct {
	size, target int
	loopback
	mu     sync.Mutex
	byTurn map[int]longServed
	total  float64
}

type longServed struct {
	at      time.Time // when the first successful answer was written
	seconds float64
}

func startLongTool(target, size int) (*longTool, error) {
	t := &longTool{size: size, target: target, byTurn: map[int]longServed{}}
	if err := t.serve("127.0.0.1:0", t); err != nil {
		return nil, fmt.Errorf("bench: long: tool server: %w", err)
	}
	return t, nil
}

func (t *longTool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	var args struct {
		Turn int `json:"turn"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&args); err != nil || args.Turn < 1 {
		http.Error(w, `{"error":"want {\"turn\": k} with k >= 1"}`, http.StatusBadRequest)
		return
	}
	page := LongPage(args.Turn, t.target, t.size)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(page)))
	_, _ = io.WriteString(w, page)
	end := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	spent := end.Sub(began).Seconds()
	t.total += spent
	if s, ok := t.byTurn[args.Turn]; ok {
		s.seconds += spent
		t.byTurn[args.Turn] = s
	} else {
		t.byTurn[args.Turn] = longServed{at: end, seconds: spent}
	}
}

func (t *longTool) served() map[int]longServed {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int]longServed, len(t.byTurn))
	for k, v := range t.byTurn {
		out[k] = v
	}
	return out
}

func (t *longTool) seconds() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

var longWords = strings.Fields(`the of and to in is was for on that with as by at from it an be this which or
are have has had not but were they their been one all would there will more when can if out so said what up
its about into than them only other new some could time these two may then do first any my now such like our
over man me even most made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still own see men work long get
here between both life being under never day same another know while last might us great old year off come since
against go came right used take three ledger workflow history payload turn agent model tool page report`)

// LongPage is turn k's page of a target-turn run: size bytes of words
// drawn from a generator seeded by k, so every page has its own digest.
func LongPage(k, target, size int) string {
	var b strings.Builder
	b.Grow(size + 16)
	fmt.Fprintf(&b, "turn %d of %d: page %d of the report.\n", k, target, k)
	random := rand.New(rand.NewPCG(uint64(k), 0x6c6f6e67))
	for col := 0; b.Len() < size; col++ {
		word := longWords[random.IntN(len(longWords))]
		if col%12 == 11 {
			b.WriteString(word + ".\n")
		} else {
			b.WriteString(word + " ")
		}
	}
	return b.String()[:size]
}

// longModel plays a tool-calling agent on the chat-completions wire
// format: while fewer than target turns are done it asks for the next
// page, then it answers in plain text. It reads the turns done from the
// request alone (the highest turn in the assistant's tool calls and in
// the "turn k of" line that starts each page), so it is right however
// much of older outputs the engine sends, and a retried request gets the
// same answer. A reply is streamed when the request asks, as the engine's
// do.
type longModel struct {
	target int
	tool   *longTool
	loopback
	mu       sync.Mutex
	requests []longRequest
}

type longRequest struct {
	at       time.Time
	turn     int // the turn it asked for; target+1 for the final answer
	bytes    int
	tokens   int
	messages int
	seconds  float64
	gap      bool
}

func startLongModel(target int, tool *longTool) (*longModel, error) {
	m := &longModel{target: target, tool: tool}
	if err := m.serve("127.0.0.1:0", m); err != nil {
		return nil, fmt.Errorf("bench: long: model server: %w", err)
	}
	return m, nil
}

func (m *longModel) log() []longRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.requests)
}

var pageLine = regexp.MustCompile(`turn (\d+) of \d+:`)

// chatRequest is the part of a chat.completions request the fake model
// servers read (long's model, the rate-limit provider).
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools               []json.RawMessage `json:"tools"`
	MaxTokens           *int64            `json:"max_tokens"`
	MaxCompletionTokens *int64            `json:"max_completion_tokens"`
}

func (m *longModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"only POST .../chat/completions is served","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, `{"error":{"message":"read body","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"body is not a chat.completions request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	done := 0
	for _, msg := range req.Messages {
		for _, call := range msg.ToolCalls {
			var args struct {
				Turn int `json:"turn"`
			}
			if call.Function.Name == longToolName && json.Unmarshal([]byte(call.Function.Arguments), &args) == nil {
				done = max(done, args.Turn)
			}
		}
		if msg.Role == "tool" {
			for _, match := range pageLine.FindAllStringSubmatch(contentText(msg.Content), -1) {
				n, _ := strconv.Atoi(match[1])
				done = max(done, n)
			}
		}
	}
	tokens := requestTokens(req, body)
	turn := done + 1
	var message, finish string
	if done >= m.target || len(req.Tools) == 0 {
		turn = m.target + 1
		answer, _ := json.Marshal(fmt.Sprintf("PARTIAL ANSWER: I read %d pages of the report.\nHANDOFF NOTE: done; nothing is left to read.", done))
		if done >= m.target {
			answer, _ = json.Marshal(fmt.Sprintf("I have read all %d pages of the report. Done.", done))
		}
		message, finish = fmt.Sprintf(`{"role":"assistant","content":%s}`, answer), "stop"
	} else {
		message = fmt.Sprintf(`{"role":"assistant","content":"Reading page %d.","tool_calls":[{"id":"call_%d","type":"function","function":{"name":%q,"arguments":"{\"turn\":%d}"}}]}`,
			turn, turn, longToolName, turn)
		finish = "tool_calls"
	}
	reply := fmt.Sprintf(`{"id":"chatcmpl-long-%d","object":"chat.completion","created":%d,"model":%q,`+
		`"choices":[{"index":0,"message":%s,"finish_reason":%q}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		turn, began.Unix(), longModelName, message, finish, tokens, longCompletionTokens, tokens+longCompletionTokens)
	_ = agentsagatest.WriteReply(w, body, []byte(reply))
	served := len(m.tool.served())
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, longRequest{at: began, turn: turn, bytes: len(body), tokens: tokens,
		messages: len(req.Messages), seconds: time.Since(began).Seconds(), gap: done < served})
}

// o200k counts tokens as OpenAI's current models do, for the model
// server's view of a request's size.
var o200k = func() tokenizer.Codec {
	c, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		panic(fmt.Sprintf("bench: the o200k tokenizer is embedded and must load: %v", err))
	}
	return c
}()

// requestTokens is a chat request's size as the provider would count it:
// o200k tokens of every message's text and tool calls, the tool
// definitions, and 4 tokens of framing a message. A body the tokenizer
// refuses counts a token a byte.
func requestTokens(req chatRequest, body []byte) int {
	count := func(s string) int {
		n, err := o200k.Count(s)
		if err != nil {
			return len(s)
		}
		return n
	}
	total := 0
	for _, msg := range req.Messages {
		total += 4 + count(contentText(msg.Content))
		for _, call := range msg.ToolCalls {
			total += count(call.Function.Name) + count(call.Function.Arguments)
		}
	}
	if len(req.Tools) > 0 {
		tools, _ := json.Marshal(req.Tools)
		total += count(string(tools))
	}
	if total == 0 {
		return len(body)
	}
	return total
}

// contentText is a message's content as text: a string, or the text parts
// of an array of parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

// LongChart writes to path a PNG of history bytes per turn against the
// turn, one line per length (both axes logarithmic), each line's end
// marked (a cross where the run did not complete), and the 8 KiB
// bound as a dashed line.
func LongChart(path string, rows []LongRow) error {
	p := plot.New()
	p.Title.Text = "Workflow history per turn as a run goes on"
	p.X.Label.Text = "turn"
	p.Y.Label.Text = "history so far / turns so far (KiB)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())

	minY, maxY, maxX := float64(longMaxBytesPerTurn)/1024, float64(longMaxBytesPerTurn)/1024, 10.0
	for i, r := range rows {
		var xys plotter.XYs
		for _, pt := range r.Series {
			if pt.Turn < 1 || pt.HistoryBytes <= 0 {
				continue
			}
			xys = append(xys, plotter.XY{X: float64(pt.Turn), Y: float64(pt.HistoryBytes) / 1024 / float64(pt.Turn)})
		}
		// The run's own figure, all events included, at its last turn.
		if r.TurnsDone > 0 && r.BytesPerTurn > 0 {
			xys = append(xys, plotter.XY{X: float64(r.TurnsDone), Y: r.BytesPerTurn / 1024})
		}
		if len(xys) == 0 {
			continue
		}
		for _, xy := range xys {
			minY, maxY, maxX = math.Min(minY, xy.Y), math.Max(maxY, xy.Y), math.Max(maxX, xy.X)
		}
		// Earlier lines wider, so a later one drawn over the same path
		// (two runs ended at the same turn) leaves both visible.
		line, end, err := addSeries(p, xys, i, vg.Points(1.5+2*float64(len(rows)-1-i)), vg.Points(4))
		if err != nil {
			return fmt.Errorf("bench: long chart: %w", err)
		}
		if r.Status != agentsagatype.RunCompleted {
			end.Shape = draw.CrossGlyph{}
			end.Radius = vg.Points(6)
		}
		p.Legend.Add(fmt.Sprintf("%s turns: %s", thousands(r.Turns), r.Outcome), line)
	}
	maxX = math.Max(maxX, 10)
	if err := addTarget(p, plotter.XYs{{X: 1, Y: float64(longMaxBytesPerTurn) / 1024}, {X: maxX, Y: float64(longMaxBytesPerTurn) / 1024}},
		"target: <= 8 KiB per turn"); err != nil {
		return fmt.Errorf("bench: long chart: %w", err)
	}
	p.X.Min, p.X.Max = 1, maxX*1.1
	// Headroom above for the legend.
	p.Y.Min, p.Y.Max = minY/2, maxY*20
	if err := savePNG(p, path); err != nil {
		return fmt.Errorf("bench: long chart: %w", err)
	}
	return nil
}
