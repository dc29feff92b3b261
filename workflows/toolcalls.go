package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/payload"
	"github.com/agentsaga/agentsaga/internal/runbudget"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// A turn's tool calls. The model may ask for several calls in one turn;
// the workflow runs them side by side and hands their results back in the
// order they were asked for. Each call is one toolCall that goes through
// four phases, one function each:
//
//	plan    check the call, choose its route, count it, build its request
//	send    schedule its activity, or start its sub-agent's child workflow
//	settle  wait for it; wait out an open breaker; give up a failed call
//	        (fence its key) before the model hears of the failure
//	record  fill its trace entry, queue the message the model reads, and
//	        charge the run
//
// The commands these phases emit, and their order, are a contract with
// runs in flight (versions.go): plan and send go call by call; the calls'
// activities settle side by side (give-ups-together) or, on the old path,
// one after another in call order; sub-agents are waited for, and every
// call recorded, in call order.

// route is how a tool call is carried out.
type route int

const (
	// routeRefused: the workflow refused the call itself (an unknown tool,
	// arguments that are not JSON, a budget too small to share with a
	// sub-agent, a payload too large). Nothing is sent; the model reads why.
	routeRefused route = iota
	// routeReadBack: read_result, an output read back whole from the ledger.
	routeReadBack
	// routeTool: the tool's activity, under the call's idempotency key.
	routeTool
	// routeAgent: a sub-agent, run as a child workflow.
	routeAgent
)

// toolTurn is one turn's tool calls, in call order, from the model's
// requests to the results queued for the next turn. r is the run whose
// budget, conversation, book of calls and trace they charge.
type toolTurn struct {
	r     *run
	calls []*toolCall
}

// toolCall is one tool call of a turn, from the model's request to the
// result the model reads.
type toolCall struct {
	call agentsagatype.ToolCall
	// seq is the result's place in the conversation: results go back in
	// call order, whichever call finishes first.
	seq int
	// activityID names the call's activity or child workflow; with the
	// workflow ID it makes the call's idempotency key.
	activityID string
	route      route
	// entry is the call's line in the trace. Its Error, once set, is what
	// the model reads instead of an output.
	entry TraceEntry

	// plan sets what send needs.
	request     wire.ToolCallRequest  // routeTool
	child       RunSpec               // routeAgent
	reservation runbudget.Reservation // routeAgent: its share of the budget

	future workflow.Future // send sets it

	// settle sets the outcome.
	settled bool
	result  wire.ToolResult // routeTool, routeReadBack
	answer  RunResult       // routeAgent
	err     error
	gaveUp  wire.GaveUp // what the ledger knew of a call given up
	parked  parkedCall  // how the call waited behind an open breaker
	// spendStop is what the account's spend cap said of a call it could
	// not pay for, when that was not to wait: a *spendCapStop (the run
	// finishes) or a *modelParkedError (a human is asked).
	spendStop error
	// escalation is why a gate that refused the call asks for a human, and
	// ending why the run fails after this turn (an approval nobody gave in
	// time, when the spec says so); aborted, that it is aborted rather than
	// failed (on_timeout: abort).
	escalation, ending string
	aborted            bool
	// newArguments: the run had not called this tool with these arguments
	// before; readOnly: the tool only reads. Together with success they
	// make the call progress for the watchdog (changedTheWorld).
	newArguments, readOnly bool
}

// changedTheWorld says whether a settled call is a new effect: it
// succeeded, with arguments the run had not used before, on a tool that
// is not read_only (a sub-agent included: it may change the world). The
// watchdog counts it as progress whatever it answered.
func (c *toolCall) changedTheWorld() bool {
	return c.newArguments && !c.readOnly && c.entry.Error == "" && (c.route == routeTool || c.route == routeAgent)
}

// --- plan ---

// refuse ends a call in plan: the model reads why, and nothing is sent.
func (c *toolCall) refuse(why string) *toolCall {
	c.route, c.entry.Error = routeRefused, why
	return c
}

// messageRef is the call's place in the conversation, where its activity
// writes a successful output.
func (c *toolCall) messageRef() wire.MessageRef {
	return wire.MessageRef{Seq: c.seq, ToolCallID: c.call.ID, Name: c.call.Name}
}

// --- send ---

// --- settle ---

// --- record ---

// run runs one turn's tool calls and queues their results, in call
// order, for the model to read. Its outcome is, first to last: the run
// fails (a call's ending), stops on a spend cap, asks a human (the first
// call that asks says why), or the watchdog finds it stuck.
func (tt *toolTurn) run(ctx workflow.Context, step int, calls []agentsagatype.ToolCall) turnOutcome {
	r := tt.r
	first := r.conv.Seq
	r.conv.Seq += len(calls)
	tt.calls = make([]*toolCall, len(calls))
	turn := tt.calls
	ends := ""
	for i, call := range calls {
		if ends != "" {
			// A call before this one ended the run (an approval's timeout,
			// from agentsaga-commands 10): the rest of the turn is not sent.
			turn[i] = (&toolCall{call: call, seq: first + i, activityID: activityid.Tool(step, i+1, call.Name),
				entry: TraceEntry{Step: step, Kind: "tool", Tool: call.Name, Arguments: clip(call.Arguments, textclip.PreviewBytes)}}).refuse("not sent: " + ends)
			continue
		}
		turn[i] = tt.planCall(ctx, step, i+1, first+i, call)
		if r.versions.approvals && turn[i].route == routeTool {
			tt.gateCall(ctx, turn[i])
		}
		tt.sendCall(ctx, turn[i])
		if r.humans.deadlines(r.versions) && turn[i].ending != "" {
			ends = turn[i].ending
		}
	}
	if r.versions.giveUpsTogether {
		tt.settleSideBySide(ctx, turn)
	}
	entries := make([]TraceEntry, len(turn))
	effects := make([]bool, len(turn))
	var escalation, ending string
	var aborted bool
	var capped *spendCapStop
	for i, c := range turn {
		if !c.settled {
			tt.settleCall(ctx, c) // a sub-agent; on the old path, every call
		}
		why := tt.recordCall(c)
		if why == "" {
			why = c.escalation
		}
		if escalation == "" {
			escalation = why // the first call that asks for a human says why
		}
		if c.ending != "" && (ending == "" || !r.humans.deadlines(r.versions)) {
			ending, aborted = c.ending, c.aborted // on the old path, the last call's
		}
		if stop := (*spendCapStop)(nil); errors.As(c.spendStop, &stop) {
			capped = stop
		}
		entries[i] = c.entry
		effects[i] = c.changedTheWorld()
	}
	r.trace.record(entries...)
	stuck := r.watchdog.endTurn(entries, effects, r.versions.outageAwareWatchdog)
	switch {
	case ending != "" && aborted:
		return turnOutcome{end: endAborted, why: ending}
	case ending != "":
		return turnOutcome{end: endFailed, why: ending}
	case capped != nil:
		return turnOutcome{end: endSpendCap, capped: capped, step: step + 1}
	case escalation != "":
		return turnOutcome{end: askHuman, why: escalation}
	case stuck != "" && r.spec.Watchdog.OnFire != WatchdogEscalate:
		return turnOutcome{end: endWatchdog, why: "watchdog: " + stuck, step: step + 1}
	case stuck != "":
		return turnOutcome{end: askHuman, why: "The watchdog fired: " + stuck}
	}
	return turnOutcome{}
}

// planCall checks the n-th call of a turn (from 1) and prepares it. What
// the workflow can check itself (a tool it knows, arguments that are
// JSON, a budget to share, a payload within bounds) it checks here, so a
// malformed call never becomes an activity and nothing reaches the ledger.
func (tt *toolTurn) planCall(ctx workflow.Context, step, n, seq int, call agentsagatype.ToolCall) *toolCall {
	r := tt.r
	c := &toolCall{call: call, seq: seq, activityID: activityid.Tool(step, n, call.Name),
		entry: TraceEntry{Step: step, Kind: "tool", Tool: call.Name, Arguments: clip(call.Arguments, textclip.PreviewBytes)}}
	if call.Name == wire.ReadResultTool && r.conv.ReadBack {
		r.calls.Stats.Calls++
		c.route, c.entry.ActivityID = routeReadBack, c.activityID
		return c
	}
	tool, ok := r.spec.tool(call.Name)
	if !ok {
		return c.refuse(fmt.Sprintf("the model asked for unknown tool %q; the tools are: %s", call.Name, r.spec.toolNames()))
	}
	if !json.Valid([]byte(call.Arguments)) {
		return c.refuse(fmt.Sprintf("the arguments for tool %q are not valid JSON: %s", call.Name, clip(call.Arguments, 200)))
	}
	if r.watchdog.voluntaryRetry(call.Name, call.Arguments) {
		// The model retried by choice: counted and charged as a retry.
		r.calls.Stats.Retries++
		r.calls.Stats.ToolRetries[call.Name]++
	} else {
		c.newArguments = true
	}
	c.readOnly = tool.ReadOnly
	// Counted before its request is built: the run's retry allowance
	// (plan) includes this turn's calls so far.
	r.calls.Stats.Calls++
	c.entry.ActivityID = c.activityID
	if tool.Kind == agentsagatype.ToolKindAgent {
		return tt.planAgent(ctx, c)
	}
	return tt.planTool(c, tool)
}

// planTool builds a tool call's request: the retry allowance it may spend,
// where its output goes in the conversation, and its undo, when it has one.
func (tt *toolTurn) planTool(c *toolCall, tool agentsagatype.ToolSpec) *toolCall {
	r := tt.r
	record := c.messageRef()
	request := wire.ToolCallRequest{Tool: tool, Arguments: c.call.Arguments, Retry: r.plan(tool.Name, "tool:"+tool.Name), Record: &record,
		Spend: tt.toolSpend(tool.Name)}
	if tool.Compensate != nil {
		request.Compensation = &wire.CompensationRequest{Tool: tool.Compensate.Tool, ArgumentsTemplate: string(tool.Compensate.Arguments)}
	}
	if err := payload.Check("the call of tool "+c.call.Name, request); err != nil {
		c.entry.ActivityID = "" // never scheduled
		return c.refuse(errorText(err))
	}
	c.route, c.request = routeTool, request
	return c
}

// planAgent builds a sub-agent's run and reserves its share of the
// parent's budget at once, so the next sub-agent of the same turn is
// granted only what is left (runbudget.RunBudget.Grant and Reserve).
func (tt *toolTurn) planAgent(ctx workflow.Context, c *toolCall) *toolCall {
	r := tt.r
	spec, granted, err := tt.childSpec(workflow.Now(ctx), c.call.Name, c.call.Arguments)
	if err != nil {
		return c.refuse(err.Error())
	}
	if err := payload.Check("sub-agent "+c.call.Name+"'s spec", spec); err != nil {
		return c.refuse(errorText(err))
	}
	c.route, c.entry.Kind, c.child = routeAgent, "agent", spec
	c.reservation = r.budget.Reserve(granted)
	return c
}

// sendCall schedules a planned call's activity, or starts its sub-agent.
func (tt *toolTurn) sendCall(ctx workflow.Context, c *toolCall) {
	switch c.route {
	case routeReadBack:
		c.future = tt.readResult(ctx, c.activityID, c.call, c.messageRef())
	case routeTool:
		c.future = tt.sendToolCall(ctx, c.activityID, c.call, c.request)
	case routeAgent:
		c.future = tt.startChild(ctx, c.activityID, c.child)
	}
}

// readResult reads a shortened output back whole into the conversation, as
// the result of the model's read_result call.
func (tt *toolTurn) readResult(ctx workflow.Context, activityID string, call agentsagatype.ToolCall, record wire.MessageRef) workflow.Future {
	r := tt.r
	var args struct {
		Key string `json:"key"`
	}
	_ = json.Unmarshal([]byte(call.Arguments), &args)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID: activityID, StartToCloseTimeout: 30 * time.Second, Summary: clip("read_result "+args.Key, 100),
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: int32(r.spec.Retry.MaxAttempts)},
	})
	return workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityReadResult), wire.ReadResultRequest{
		WorkflowID: r.workflowID, Key: args.Key, Record: record})
}

// sendToolCall schedules a tool call under activityID: its first send and
// each send after waiting for the tool's breaker.
func (tt *toolTurn) sendToolCall(ctx workflow.Context, activityID string, call agentsagatype.ToolCall, request wire.ToolCallRequest) workflow.Future {
	r := tt.r
	timeout := request.Tool.Timeout()
	actx := workflow.WithActivityOptions(ctx, r.activityOptions(ctx, activityID, timeout, clip(call.Name+" "+call.Arguments, 100)))
	actx = workflow.WithHeartbeatTimeout(actx, heartbeatTimeout(timeout))
	return workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityCallTool), request)
}

// settleSideBySide settles the turn's activities each in a coroutine of
// its own, so the give-ups of calls that failed together run together
// rather than one straggler's lease after another's. Sub-agents are left
// to toolTurn.run, which waits for them in call order.
func (tt *toolTurn) settleSideBySide(ctx workflow.Context, turn []*toolCall) {
	settling := workflow.NewWaitGroup(ctx)
	for _, c := range turn {
		if c.route == routeTool || c.route == routeReadBack {
			settling.Add(1)
			workflow.Go(ctx, func(ctx workflow.Context) {
				defer settling.Done()
				tt.settleCall(ctx, c)
			})
		}
	}
	settling.Wait(ctx)
}

// settleCall waits for a sent call and reads its outcome.
func (tt *toolTurn) settleCall(ctx workflow.Context, c *toolCall) {
	switch c.route {
	case routeReadBack, routeTool:
		tt.settleActivity(ctx, c)
	case routeAgent:
		// A failed sub-agent has compensated its own actions already:
		// its result is read either way.
		err := c.future.Get(ctx, &c.answer)
		c.answer, c.err = childResult(err, c.answer)
	}
	c.settled = true
}

// settleActivity waits for a call's activity. A tool call refused by its
// dependency's open breaker waits the breaker out (waitOutBreaker). A
// tool call that failed in a way that may have claimed its key is given
// up: the key is fenced before the model hears "failed", and an attempt
// that did the work after all makes the call a success.
func (tt *toolTurn) settleActivity(ctx workflow.Context, c *toolCall) {
	r := tt.r
	c.err = c.future.Get(ctx, &c.result)
	if c.route == routeReadBack {
		return // it only reads the ledger: no breaker to wait for, no key to fence
	}
	if _, refused := openBreakerRefusal(c.err); refused && r.versions.parkOnOpenBreaker {
		tool, _ := r.spec.tool(c.call.Name)
		c.err, c.parked = tt.waitOutBreaker(ctx, c.activityID, tool, c.call, c.request, c.err, &c.result)
	}
	if _, refused := spendRefusalIn(c.err); refused && r.versions.toolSpend {
		c.err = tt.waitForToolSpend(ctx, c)
	}
	if c.err != nil && classify(c.err).mayHaveClaimed() && ctx.Err() == nil {
		c.gaveUp = tt.giveUp(ctx, c.activityID, c.call)
		if c.gaveUp.Status == agentsagatype.ActionCompleted {
			c.err = nil
			c.result = wire.ToolResult{Output: c.gaveUp.Preview, Digest: c.gaveUp.Digest, Replayed: true, Attempt: c.gaveUp.LeafCalls}
		}
	}
}

// giveUp fences a failed call's key in the ledger and returns what the
// ledger knows of it. It waits while a straggling attempt still holds the
// key (at most that attempt's own timeout), and retries while the ledger
// is unreachable: the model must not hear "failed" before the key is
// fenced.
func (tt *toolTurn) giveUp(ctx workflow.Context, activityID string, call agentsagatype.ToolCall) wire.GaveUp {
	r := tt.r
	tool, _ := r.spec.tool(call.Name)
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          activityid.Sub(activityID, activityid.GiveUp, 0),
		StartToCloseTimeout: tool.Timeout() + time.Minute,
		HeartbeatTimeout:    10 * time.Second,
		Summary:             clip("give up on "+activityID, 100),
	})
	var gaveUp wire.GaveUp
	if err := workflow.ExecuteActivity(actx, r.versions.activity(wire.ActivityGiveUpCall), wire.GiveUp{
		Key: activityid.Key(r.workflowID, activityID), WorkflowID: r.workflowID, ActivityID: activityID,
		Tool: call.Name, Arguments: call.Arguments,
	}).Get(ctx, &gaveUp); err != nil {
		workflow.GetLogger(ctx).Warn("could not fence a failed call's key", "activity_id", activityID, "error", err)
	}
	return gaveUp
}

// recordCall fills a settled call's trace entry, queues what the model
// reads of it, and charges the run. It returns why a human should be
// asked, when the call's failure says one should.
func (tt *toolTurn) recordCall(c *toolCall) (escalation string) {
	r := tt.r
	switch c.route {
	case routeReadBack, routeTool:
		escalation = tt.recordActivity(c)
	case routeAgent:
		tt.recordAgent(c)
	}
	if c.entry.Error != "" {
		// A successful call's output was written by its activity; an
		// error is the workflow's to write.
		r.conv.Pending = append(r.conv.Pending, agentsagatype.Message{Seq: c.seq, Role: "tool", ToolCallID: c.call.ID, Name: c.call.Name,
			Content: textclip.Preview("error: " + c.entry.Error)})
	}
	return escalation
}

// recordActivity records a call that ran as an activity: its output or
// its error, the leaf calls it took (the ledger's count when an attempt
// timed out without reporting), and what it cost.
func (tt *toolTurn) recordActivity(c *toolCall) (escalation string) {
	r := tt.r
	e := &c.entry
	if c.err != nil {
		e.Error = errorText(c.err)
		e.Attempts, e.Denial = callFailure(c.err)
		if r.versions.parkOnOpenBreaker && e.Denial == budget.DenyCircuitOpen {
			e.Attempts = c.parked.leafCalls // a refusal at the gate was not a call
		}
		e.Attempts = max(e.Attempts, c.gaveUp.LeafCalls)
		var asked *modelParkedError
		switch {
		case errors.As(c.spendStop, &asked):
			escalation = asked.why
		case c.spendStop != nil:
			// The run finishes after this turn (toolTurn.run).
		default:
			escalation = tt.escalationFor(c.call.Name, c.err, e.Denial, c.parked.escalation)
		}
	} else {
		e.Output, e.Digest, e.Replayed, e.Attempts = c.result.Output, c.result.Digest, c.result.Replayed, c.result.Attempt+c.parked.leafCalls
	}
	e.Parks = c.parked.parks
	r.calls.charge(c.call.Name, e, r.budget, r.versions.parkOnOpenBreaker)
	r.budget.Spend(budget.Usage{USD: r.spec.Prices.ToolUSD(c.call.Name, e.Attempts)})
	return escalation
}

// escalationFor says why a failed tool call should bring in a human: a
// refusal, a permission error, an open breaker (at once on the old path;
// once the call has waited as long as it may, parkEscalation, on the new),
// or too many failures of one tool. Anything else goes back to the model
// as an error to work with.
func (tt *toolTurn) escalationFor(tool string, err error, denial, parkEscalation string) string {
	r := tt.r
	failed := classify(err)
	if failed.cancelled {
		return ""
	}
	r.calls.ToolFailures[tool]++
	switch {
	case failed.asksHuman != "":
		return fmt.Sprintf(failed.asksHuman, tool, failed.message)
	case denial == budget.DenyCircuitOpen && r.versions.parkOnOpenBreaker:
		return parkEscalation
	case denial == budget.DenyCircuitOpen:
		return fmt.Sprintf("The circuit breaker for tool %s is open: the dependency is down", tool)
	case r.spec.Escalate.AfterToolFailures > 0 && r.calls.ToolFailures[tool] >= r.spec.Escalate.AfterToolFailures:
		return fmt.Sprintf("Tool %s has failed %d times in this run: %s", tool, r.calls.ToolFailures[tool], failed.message)
	}
	return ""
}

// recordAgent records a finished sub-agent: its spending becomes the
// parent's and its reservation is released (absorb), and the parent's
// conversation gets its answer in a preview's length; the whole answer is
// its own run's.
func (tt *toolTurn) recordAgent(c *toolCall) {
	r := tt.r
	tt.absorb(c.reservation, c.answer)
	c.entry.Output, c.entry.Attempts = textclip.Preview(childOutput(c.answer)), 1
	if c.err != nil {
		c.entry.Error = errorText(c.err)
	}
	r.conv.Pending = append(r.conv.Pending, agentsagatype.Message{Seq: c.seq, Role: "tool", ToolCallID: c.call.ID, Name: c.call.Name,
		Content: c.entry.Output, Key: activityid.Key(r.workflowID, c.entry.ActivityID)})
}
