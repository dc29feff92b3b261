package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/convfit"
	"github.com/agentsaga/agentsaga/internal/keyed"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/payload"
	"github.com/agentsaga/agentsaga/internal/replayreport"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Activities are the worker's activity implementations, registered on a
// worker by Register (agentsaga.Engine.Register calls it); the workflow
// schedules them by name.
type Activities struct {
	Ledger  *ledgerdb.Store
	Toolbox *Toolbox
	// HTTPClient carries HTTP tools and model providers; nil means
	// http.DefaultClient. It must not retry on its own.
	HTTPClient *http.Client
	// Getenv reads API keys on the worker, so they never enter workflow
	// history; nil means os.Getenv.
	Getenv func(string) string
	// Models are the model providers this worker can call; nil means the
	// built-in ones (NewModels).
	Models *Models
	// mcp holds the worker's MCP sessions, one per server, made on first
	// use (mcpSessions); CloseSessions ends them.
	mcpOnce sync.Once
	mcp     *mcpSessionSet
	// declaredQuotas are the model quotas this process has declared
	// (turnQuota), by key and limits.
	declaredQuotas sync.Map
}

// toolResult is output as history carries it.
func toolResult(output string, replayed bool, attempt int) wire.ToolResult {
	return wire.ToolResult{Output: textclip.Preview(output), Digest: textclip.Digest(output), Bytes: len(output), Replayed: replayed, Attempt: attempt}
}

// callModel makes one model turn, once per key: the run's messages before
// Conversation.Through are read from the ledger (after Conversation.Append
// is written), fitted to the model's context budget, and sent; the reply is
// stored under the call's idempotency key and recorded as message Through.
// A later attempt of a turn whose reply is stored returns it without calling
// the provider again: a worker lost after the reply costs no second bill.
func (a *Activities) callModel(ctx context.Context, call wire.ModelCall) (agentsagatype.ModelTurn, error) {
	ctx = keyed.WithCallKey(ctx, call.Key)
	model, err := a.model(call.Model)
	if err != nil {
		return agentsagatype.ModelTurn{}, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeModelConfig, nil)
	}
	conv := call.Conversation
	appended := make([]ledgerdb.Message, len(conv.Append))
	for i, m := range conv.Append {
		appended[i] = convfit.ToLedger(m)
	}
	target, turnOf := call.Model.Target(), cmp.Or(call.TurnOf, call.Model.Target())
	info := activity.GetInfo(ctx)
	markCall(ctx)
	arguments, _ := json.Marshal(map[string]any{"through": conv.Through, "finish": call.Finish})
	trailing := turnTrailing(call)
	defs, _ := json.Marshal(call.Tools)
	defTokens := convfit.Count(string(defs))
	quotaClaim, err := a.turnQuota(ctx, call)
	if err != nil {
		return agentsagatype.ModelTurn{}, temporal.NewApplicationError(fmt.Sprintf("model: quota: %v", err), wire.ErrTypeLedgerUnavailable)
	}
	ctx, sink := withHeaderSink(ctx)
	var used agentsagatype.Usage
	classify := toActivityError
	if quotaClaim != nil {
		classify = func(err error) error {
			if rateLimited(err) {
				return keyed.QuotaWait(err.Error(), sink.closedUntil(), true)
			}
			return toActivityError(err)
		}
	}
	// The reply's text streams to the run's event log: its first chunk at
	// once, then in batches; the last goes out with the settle, in its
	// statement, and a failed attempt's is dropped (its settle voids what
	// was published).
	text := a.streamText(ctx, info)
	defer func() {
		text.Rest()
		if err := text.Err(); err != nil && ctx.Err() == nil {
			activity.GetLogger(ctx).Warn("could not publish a turn's streamed text", "key", keyed.CallKey(ctx), "error", err)
		}
	}()
	// A stored turn is returned as it was: the workflow charges its usage
	// once, because it sees the turn once.
	output, _, err := keyed.Once(ctx, a.Ledger, keyed.Call{
		Action: ledgerdb.ActionRequest{Key: keyed.CallKey(ctx), WorkflowID: info.WorkflowExecution.ID, ActivityID: info.ActivityID,
			Tool: "model:" + turnOf, Arguments: string(arguments), Kind: ledgerdb.ActionModel},
		Kind: ledgerdb.LeafModel, Target: target,
		Turn: &ledgerdb.TurnRead{WorkflowID: conv.WorkflowID, Append: appended, Through: conv.Through,
			Fit: convfit.Request(trailing, defTokens, call.Model.ContextTokens()), Quota: quotaClaim, Spend: turnSpend(call)},
		Quota: func(admission ledgerdb.Admission, callErr error) *ledgerdb.QuotaAnswer {
			return sink.answer(admission, used, callErr)
		},
		Published: text.Rest,
		Spend: func(error) float64 {
			if call.Spend == nil {
				return 0
			}
			// As the workflow charges the run's budget; a failed attempt
			// reported no usage: its reservation is given back.
			p := call.Spend
			return budget.ModelPrice{InputPerMillion: p.InputPerMillion, OutputPerMillion: p.OutputPerMillion,
				CachedInputPerMillion: p.CachedInputPerMillion, CacheWritePerMillion: p.CacheWritePerMillion}.USD(used)
		},
		Run: func(ctx context.Context, claim ledgerdb.Claim) (string, *ledgerdb.Message, error) {
			turn, err := a.modelTurn(ctx, model, call, convfit.Claimed(claim, trailing), defTokens, text)
			if err != nil {
				return "", nil, err
			}
			used = turn.Usage
			turn.AnsweredBy = target
			if c := claim.SpendCap; c.Admitted {
				turn.Account = &agentsagatype.AccountLeft{Account: c.Cap.Account, Period: c.Cap.Period, USD: c.Cap.USD,
					Left: c.Left(), Resets: c.Resets}
			}
			stored, _ := json.Marshal(turn)
			reply := agentsagatype.Message{Seq: conv.Through, Role: "assistant", Content: turn.Content, ToolCalls: turn.ToolCalls,
				Reasoning: turn.Reasoning}
			if turn.Refusal != "" {
				reply.Content = "I refused: " + turn.Refusal
			}
			row := convfit.ToLedger(reply)
			return string(stored), &row, nil
		},
	}, classify)
	if err != nil {
		return agentsagatype.ModelTurn{}, err
	}
	if err := payload.Check("the model's reply to "+keyed.CallKey(ctx), json.RawMessage(output)); err != nil {
		return agentsagatype.ModelTurn{}, err
	}
	var turn agentsagatype.ModelTurn
	if err := json.Unmarshal([]byte(output), &turn); err != nil {
		return agentsagatype.ModelTurn{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("model: the stored reply of %s does not decode: %v", keyed.CallKey(ctx), err), wire.ErrTypeModelConfig, nil)
	}
	turn.Attempt = int(info.Attempt)
	return turn, nil
}

// turnSpend is what a turn charged to an account reserves in its claim:
// the conversation's tokens at the input price and max_tokens (or the
// reply's default reservation) at the output price.
func turnSpend(call wire.ModelCall) *ledgerdb.SpendClaim {
	if call.Spend == nil {
		return nil
	}
	// The reservation must stay an upper bound: on a model that writes
	// its prompt cache, every input token may be a cache write, the
	// dearest kind of input.
	p, input := call.Spend, call.Spend.InputPerMillion
	if writesPromptCache(call.Model) {
		// A million input tokens, all written to the cache.
		written := agentsagatype.Usage{InputTokens: 1_000_000, CacheWriteTokens: 1_000_000}
		input = max(input, budget.ModelPrice{InputPerMillion: p.InputPerMillion, CacheWritePerMillion: p.CacheWritePerMillion}.USD(written))
	}
	return &ledgerdb.SpendClaim{Account: call.Spend.Account, InputUSDPerMillion: input,
		OutputUSDPerMillion: call.Spend.OutputPerMillion, OutputTokens: cmp.Or(call.Model.MaxTokens, defaultOutputReservation),
		Finishing: call.Finish}
}

// turnTrailing is what a request sends after the conversation: the budget
// note, and a finish call's instructions.
func turnTrailing(call wire.ModelCall) []agentsagatype.Message {
	var trailing []agentsagatype.Message
	if call.Note != "" {
		trailing = append(trailing, agentsagatype.Message{Role: "system", Content: call.Note})
	}
	if call.Finish && call.FinishInstructions != "" {
		trailing = append(trailing, agentsagatype.Message{Role: "system", Content: call.FinishInstructions})
	}
	return trailing
}

// modelTurn calls the model with the conversation its claim read, fitted.
// Its text, as it streams, goes to text's batches.
func (a *Activities) modelTurn(ctx context.Context, model Model, call wire.ModelCall, fit convfit.Fitted, defTokens int, text *runevents.Batcher) (agentsagatype.ModelTurn, error) {
	// The attempt's lease keeper heartbeats while the model answers.
	spanCtx, span := startModelSpan(ctx, call)
	turn, err := model.Turn(spanCtx, ModelRequest{Messages: fit.Messages, Tools: call.Tools, Finish: call.Finish, OmittedTurns: fit.Omitted,
		OnText: text.Add, CacheKey: activity.GetInfo(ctx).WorkflowExecution.ID})
	endModelSpan(span, turn, err)
	if err != nil {
		return agentsagatype.ModelTurn{}, err
	}
	// A model's text is untrusted data like a tool's: it reaches history,
	// trace entries and the run's answer in the ledger.
	turn.Content, turn.Refusal = cleanText(turn.Content), cleanText(turn.Refusal)
	for i, tc := range turn.ToolCalls {
		turn.ToolCalls[i].Name, turn.ToolCalls[i].Arguments = cleanText(tc.Name), cleanText(tc.Arguments)
	}
	turn.RequestTokens, turn.Shortened, turn.OmittedTurns = fit.Tokens+defTokens, fit.Shortened, fit.Omitted
	return turn, nil
}

func (a *Activities) model(spec agentsagatype.ModelSpec) (Model, error) {
	models := a.Models
	if models == nil {
		models = defaultModels
	}
	key, err := a.apiKey(spec)
	if err != nil {
		return nil, err
	}
	return models.build(spec, key, a.HTTPClient)
}

// apiKey reads the model's key on the worker, from the variable the spec
// names; a local server may need none.
func (a *Activities) apiKey(spec agentsagatype.ModelSpec) (string, error) {
	if spec.APIKeyEnv == "" {
		return "", nil
	}
	getenv := a.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	key := getenv(spec.APIKeyEnv)
	if key == "" {
		return "", fmt.Errorf("model: environment variable %s (model.api_key_env) is not set on the worker", spec.APIKeyEnv)
	}
	return key, nil
}

// ToolCallRequest is the input of the engine's CallTool activity, for a
// workflow of a team's own that schedules it itself, by its name
// (agentsagatype.NamePrefix + "CallTool", on a worker the engine is
// registered on), and waits out an open breaker with
// workflows.WaitOutBreaker: the tool's spec, the call's arguments, its
// retry plan, and, for a call sent again, the idempotency key of its first
// activity. The fields it leaves zero (compensation, recording into a
// run's conversation, spend) are an agent run's.
type ToolCallRequest = wire.ToolCallRequest

// callTool makes one attempt of a tool call through the action ledger. A key
// that already completed returns its stored result without calling the tool;
// a key another attempt holds is waited for while that attempt's lease is
// live; a fenced key (the workflow gave up, the run is rolling back or has
// ended) fails at once with ErrTypeFenced; arguments that are not valid JSON
// or do not match the schema fail at once, before the ledger is touched.
// The whole output goes to the ledger (and, with req.Record, into the run's
// conversation); history gets a preview and a digest.
func (a *Activities) callTool(ctx context.Context, req ToolCallRequest) (wire.ToolResult, error) {
	ctx = keyed.WithCallKey(ctx, req.Key)
	if err := toolcheck.CheckArguments(req.Tool, req.Arguments); err != nil {
		return wire.ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeInvalidArguments, nil)
	}
	run, err := a.toolRunner(req.Tool)
	if err != nil {
		return wire.ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeUnknownTool, nil)
	}
	// A recorded call (a replay's) is answered from its recording, charged
	// the attempts it took there, and pays no account: nothing is sent.
	recordedAttempts := 0
	if req.Tool.Kind == agentsagatype.ToolKindRecorded {
		req.Spend = nil
		run = func(ctx context.Context, call ToolInvocation) (string, error) {
			info := activity.GetInfo(ctx)
			answer, err := a.answerFromRecording(ctx, req.Tool, info.WorkflowExecution.ID, info.ActivityID, req.Arguments)
			if err != nil {
				return "", err
			}
			recordedAttempts = answer.attempts
			if answer.failure != nil {
				return "", answer.failure
			}
			return answer.output, nil
		}
	}
	// A header whose variable is not set fails before the ledger, as a
	// missing API key does: nothing was attempted under the key.
	if _, _, err := resolveHeaders(req.Tool, a.getenv); err != nil {
		return wire.ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeToolConfig, nil)
	}
	info := activity.GetInfo(ctx)
	key := keyed.CallKey(ctx)
	markCall(ctx)
	matcher, _ := toolcheck.Refusals(req.Tool)
	settle, err := a.reserveToolAttempt(ctx, key, req.Tool.Name, req.Spend, info.Deadline)
	if err != nil {
		return wire.ToolResult{}, err
	}
	sent := false
	defer func() { settle(sent) }()
	output, replayed, err := keyed.Once(ctx, a.Ledger, keyed.Call{
		Action: ledgerdb.ActionRequest{Key: key, WorkflowID: info.WorkflowExecution.ID, ActivityID: info.ActivityID,
			Tool: req.Tool.Name, Arguments: req.Arguments, Compensation: req.Compensation, Compensates: req.Compensates},
		Kind: ledgerdb.LeafTool, Target: req.Tool.Name,
		Run: func(ctx context.Context, _ ledgerdb.Claim) (string, *ledgerdb.Message, error) {
			sent = true
			spanCtx, span := startToolSpan(ctx, req)
			output, err := run(spanCtx, ToolInvocation{Key: key, Arguments: json.RawMessage(req.Arguments), Deadline: info.Deadline, Attempt: info.Attempt})
			endSpan(span, err)
			// Capped and cleaned for every kind of tool before anything reads
			// it: the model, history and the ledger all get the same text.
			output = cleanOutput(output)
			if err != nil || req.Record == nil {
				return output, nil, err
			}
			return output, &ledgerdb.Message{Seq: req.Record.Seq, Role: "tool", Content: output,
				ToolCallID: req.Record.ToolCallID, Name: req.Record.Name, SourceKey: key,
				Tokens: convfit.EstimateTokens(agentsagatype.Message{Content: output})}, nil
		},
		Refused: func(output string) (string, bool) {
			if matcher == nil {
				return "", false
			}
			reason, refused := matcher.Match(output)
			return fmt.Sprintf("tool %s refused: %s", req.Tool.Name, reason), refused
		},
	}, toActivityError)
	if err != nil {
		return wire.ToolResult{}, err
	}
	attempt := int(info.Attempt)
	if recordedAttempts > 0 {
		attempt = recordedAttempts
	}
	return toolResult(output, replayed, attempt), nil
}

// reserveToolAttempt reserves one attempt of a priced tool call on its
// account's spend caps (nothing when spend is nil), or refuses it with
// the cap that binds: the attempt then sends nothing. settle(sent) gives
// the reservation back, spent when the attempt reached the tool. A worker
// killed in between leaves the hold to its lease, the activity's deadline:
// the ledger then spends it in full, since the key was claimed.
func (a *Activities) reserveToolAttempt(ctx context.Context, key, tool string, spend *wire.ToolSpend, deadline time.Time) (settle func(sent bool), err error) {
	if spend == nil || spend.USD <= 0 {
		return func(bool) {}, nil
	}
	lease := time.Until(deadline) + time.Minute
	r, err := a.Ledger.ReserveSpend(ctx, key, spend.Account, spend.USD, lease)
	if err != nil {
		return nil, temporal.NewApplicationError(fmt.Sprintf("tool: spend cap of %s: %v", spend.Account, err), wire.ErrTypeLedgerUnavailable)
	}
	if !r.Admitted {
		refusal := r.Refusal(spend.USD)
		refusal.Tool = tool
		return nil, keyed.SpendCapRefusal(refusal.Reason(), refusal)
	}
	return func(sent bool) {
		usd := 0.0
		if sent {
			usd = spend.USD
		}
		// Its own context: a cancelled attempt still settles what it held.
		settleCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := a.Ledger.SettleSpend(settleCtx, key, usd); err != nil {
			activity.GetLogger(ctx).Warn("a tool attempt's spend was not settled; its lease will settle it", "key", key, "error", err)
		}
	}, nil
}

func (a *Activities) toolRunner(tool agentsagatype.ToolSpec) (func(context.Context, ToolInvocation) (string, error), error) {
	switch tool.Kind {
	case agentsagatype.ToolKindHTTP:
		client := a.HTTPClient
		if client == nil {
			client = http.DefaultClient
		}
		return func(ctx context.Context, call ToolInvocation) (string, error) {
			return callHTTPTool(ctx, client, tool, call, a.getenv)
		}, nil
	case agentsagatype.ToolKindMCP:
		if tool.MCPTool == "" {
			return nil, fmt.Errorf("tool %s: an MCP server entry is listed at the run's start; only its tools are called", tool.Name)
		}
		return func(ctx context.Context, call ToolInvocation) (string, error) {
			return a.callMCPTool(ctx, tool, call)
		}, nil
	case agentsagatype.ToolKindRecorded:
		// CallTool answers it from its recording.
		return nil, nil
	case agentsagatype.ToolKindGo:
		if a.Toolbox != nil {
			if fn, ok := a.Toolbox.lookup(tool.Name); ok {
				return fn, nil
			}
		}
		registered := "none"
		if names := a.Toolbox.Names(); len(names) > 0 {
			registered = strings.Join(names, ", ")
		}
		return nil, fmt.Errorf("tool %s: no Go function of that name is registered on this worker (registered: %s)", tool.Name, registered)
	}
	return nil, fmt.Errorf("tool %s: unknown kind %q", tool.Name, tool.Kind)
}

// toActivityError classifies err for Temporal's retry: the one retry loop.
// A classified failure is benign, so the SDK does not log it at ERROR
// (quiet.go). The message is cleaned because it may quote a tool's or a provider's bytes
// and becomes a protobuf string, which must be valid UTF-8.
func toActivityError(err error) error {
	if recorded := (*recordedFailure)(nil); errors.As(err, &recorded) {
		return recorded.activityError()
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == wire.ErrTypeNotRecorded {
		return appErr
	}
	err = cleanError{err}
	c := classify(err)
	switch {
	case c.fromActivityError || c.errType == wire.ErrTypeTransient:
		// An activity error that comes back here is sent on as a
		// transient failure, as any other unclassified error.
		return transientError(err)
	case c.errType == wire.ErrTypeToolConfig:
		return temporal.NewNonRetryableApplicationError(err.Error(), c.errType, nil)
	case c.errType == wire.ErrTypeRejected || c.errType == agentsagatype.ErrTypeProtocol:
		return activityError(err.Error(), c.errType, temporal.ApplicationErrorOptions{NonRetryable: true})
	}
	return activityError(err.Error(), c.errType, temporal.ApplicationErrorOptions{
		NonRetryable: !c.retryable, NextRetryDelay: c.retryAfter, Details: []any{c.status}})
}

// recordRunStart writes the run's row to the ledger.
func (a *Activities) recordRunStart(ctx context.Context, run agentsagatype.Run) error {
	info := activity.GetInfo(ctx)
	run.WorkflowID, run.RunID = info.WorkflowExecution.ID, info.WorkflowExecution.RunID
	return a.Ledger.StartRun(ctx, run)
}

// admitRun puts the run in its account's admission queue and admits what
// fits, or reads where the run stands there; the live page hears whether
// it waits, and why.
func (a *Activities) admitRun(ctx context.Context, req wire.AdmitRequest) (wire.Admission, error) {
	adm, err := a.Ledger.AdmitRun(ctx, req)
	if err != nil {
		return wire.Admission{}, err
	}
	switch {
	case adm.Status == wire.AdmissionQueued:
		a.publish(ctx, req.RunID, req.RunID+"/queued", runevents.Queued, "", adm)
	case adm.Status == wire.AdmissionAdmitted && req.Waited:
		a.publish(ctx, req.RunID, req.RunID+"/admitted", runevents.Admitted, "", adm)
	}
	return adm, nil
}

// recordRunFinish writes how the run ended.
func (a *Activities) recordRunFinish(ctx context.Context, finish wire.RunFinish) error {
	if err := a.Ledger.FinishRun(ctx, finish.WorkflowID, finish.Outcome); err != nil {
		return err
	}
	o := finish.Outcome
	a.publish(ctx, finish.WorkflowID, finish.WorkflowID+"/finished", runevents.RunFinished, "", runFinished{
		Status: o.Status, Reason: o.Reason, Answer: textclip.Preview(o.Answer), HandoffNote: textclip.Preview(o.HandoffNote),
		Steps: o.StepsUsed, Tokens: o.TokensUsed, USD: o.USDSpent})
	return nil
}

// settlePoll is how often a fence waits for an attempt that still holds a
// live lease.
const settlePoll = 250 * time.Millisecond

// giveUpCall fences a call's key before the workflow tells the model that
// the call failed: from now on no attempt may claim it. If an attempt still
// holds a live lease, it waits (heartbeating) until that attempt settles,
// so the answer is what happened, not a guess made while it was at work.
func (a *Activities) giveUpCall(ctx context.Context, g wire.GiveUp) (wire.GaveUp, error) {
	req := ledgerdb.ActionRequest{Key: g.Key, WorkflowID: g.WorkflowID, ActivityID: g.ActivityID, Tool: g.Tool, Arguments: g.Arguments}
	for {
		fenced, err := a.Ledger.FenceAction(ctx, req, ledgerdb.FenceGivenUp)
		if err != nil {
			return wire.GaveUp{}, err
		}
		if !fenced.Live {
			gaveUp := wire.GaveUp{Status: fenced.Action.Status, LeafCalls: fenced.LeafCalls}
			if gaveUp.Status == agentsagatype.ActionCompleted {
				gaveUp.Preview, gaveUp.Digest = textclip.Preview(fenced.Action.Result), textclip.Digest(fenced.Action.Result)
			}
			return gaveUp, nil
		}
		if err := waitSettle(ctx); err != nil {
			return wire.GaveUp{}, fmt.Errorf("give up on %s: %w", g.Key, err)
		}
	}
}

// closeRun begins a run's rollback in the ledger: it fences every forward
// action of the run and of its sub-agents, refuses new claims of them, and
// waits (heartbeating) until no attempt holds a live lease on any of them.
// Only then does the walk read what to compensate.
func (a *Activities) closeRun(ctx context.Context, workflowID string) error {
	for {
		live, err := a.Ledger.CloseRun(ctx, workflowID)
		if err != nil {
			return err
		}
		if live == 0 {
			return nil
		}
		if err := waitSettle(ctx); err != nil {
			return fmt.Errorf("close run %s: %d attempts still hold their keys: %w", workflowID, live, err)
		}
	}
}

// waitSettle waits one poll while another attempt settles, heartbeating.
func waitSettle(ctx context.Context) error {
	activity.RecordHeartbeat(ctx)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settlePoll):
		return nil
	}
}

// readResult reads back, whole, an output of the run that was shortened in
// the model's requests, into the conversation as the answer to the model's
// read_result call. The key must be one of the run's (or its sub-agents').
func (a *Activities) readResult(ctx context.Context, req wire.ReadResultRequest) (wire.ToolResult, error) {
	result, err := a.Ledger.RecordResultMessage(ctx, req.WorkflowID, req.Key, ledgerdb.Message{
		Seq: req.Record.Seq, ToolCallID: req.Record.ToolCallID, Name: req.Record.Name})
	if errors.Is(err, ledgerdb.ErrNotFound) {
		return wire.ToolResult{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("read_result: %q is not the key of a completed call of this run", req.Key), wire.ErrTypeNotFound, nil)
	}
	if err != nil {
		return wire.ToolResult{}, temporal.NewApplicationError(err.Error(), wire.ErrTypeLedgerUnavailable)
	}
	return toolResult(result, true, int(activity.GetInfo(ctx).Attempt)), nil
}

// rollbackPlan reads what a run's rollback walks: the saga stack of the run
// and its sub-agents, newest first, and what cannot be undone.
func (a *Activities) rollbackPlan(ctx context.Context, req wire.RollbackPlanRequest) (wire.RollbackPlan, error) {
	// A replay's tools are recorded and register no compensation; a
	// compensation that found its way into a replay's stack all the same
	// is not run: a replay changes nothing to undo. (A run the ledger
	// cannot read now is planned as usual: Plan reports the outage.)
	if run, err := a.Ledger.GetRun(ctx, req.WorkflowID); err == nil {
		if _, replay := replayreport.RecordingOf(run.Spec); replay {
			activity.GetLogger(ctx).Info("rollback: the run is a replay; nothing is compensated", "workflow_id", req.WorkflowID)
			return wire.RollbackPlan{}, nil
		}
	}
	return a.Ledger.Plan(ctx, req.WorkflowID, req.IrreversibleTools)
}

// settleCompensation records what became of one compensation.
func (a *Activities) settleCompensation(ctx context.Context, s wire.Settlement) error {
	if err := a.Ledger.SettleCompensation(ctx, s.ForwardKey, s.Status, s.Error, s.Reason); err != nil {
		return err
	}
	a.publish(ctx, activity.GetInfo(ctx).WorkflowExecution.ID, s.ForwardKey+"/compensation/"+s.Status, runevents.CompensationStep, s.ForwardKey,
		statusData{Status: s.Status, Detail: cmp.Or(s.Error, s.Reason)})
	return nil
}

// setRunStatus records a status the run passes through while it waits.
func (a *Activities) setRunStatus(ctx context.Context, s wire.RunStatus) error {
	if err := a.Ledger.SetRunStatus(ctx, s.WorkflowID, s.Status, s.Detail); err != nil {
		return err
	}
	// The activity's ID, which the SDK numbers within the execution, is the
	// same for every attempt: each status change is one event.
	info := activity.GetInfo(ctx)
	a.publish(ctx, s.WorkflowID, s.WorkflowID+"/status/"+info.WorkflowExecution.RunID+"/"+info.ActivityID, statusEvent(s.Status, s.Detail), "",
		statusData{Status: s.Status, Detail: s.Detail})
	return nil
}

// cleanError is err with its message passed through cleanText; errors.As
// still finds what it wraps.
type cleanError struct{ err error }

func (e cleanError) Error() string { return cleanText(e.err.Error()) }
func (e cleanError) Unwrap() error { return e.err }
