// Package activities owns every call that leaves the process: model turns
// (scripted, or any OpenAI-compatible server with SDK retries off) and tool
// calls (Go functions, and HTTP tools that receive the Idempotency-Key). Each
// tool call goes through the action ledger under its idempotency key, so a
// key that completed once never executes again, and each attempt is recorded
// as a leaf call.
package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/ledger"
)

// Application error types the activities return, for the workflow and for
// operators reading failures in the UI.
const (
	ErrTypeInvalidArguments = "InvalidArguments"
	ErrTypeUnknownTool      = "UnknownTool"
	ErrTypeConflict         = "IdempotencyConflict"
	ErrTypeInFlight         = "InFlight"
	ErrTypeRejected         = "Rejected"
	ErrTypeHTTP             = "HTTPError"
	ErrTypeTransient        = "Transient"
	ErrTypeModelConfig      = "ModelConfig"
	ErrTypeRefusal          = "Refusal"
	ErrTypePermission       = "PermissionDenied" // HTTP 401 or 403
	ErrTypeNotFound         = "NotFound"         // HTTP 404 or 410: for a compensation, nothing to undo
	// ErrTypeFenced: the key no longer accepts this attempt (the workflow
	// gave up on the call, the run is rolling back or has ended, or another
	// attempt took the key over). Nothing was sent.
	ErrTypeFenced = "Fenced"
)

// Activities are the worker's activity implementations. Register a pointer
// with the worker; the workflow refers to the methods through a nil pointer.
type Activities struct {
	Ledger  *ledger.Store
	Toolbox *Toolbox
	// HTTPClient carries HTTP tools and model providers; nil means
	// http.DefaultClient. It must not retry on its own.
	HTTPClient *http.Client
	// Getenv reads API keys on the worker, so they never enter workflow
	// history; nil means os.Getenv.
	Getenv func(string) string
}

// ModelCall is the input of CallModel.
type ModelCall struct {
	Model   ModelSpec    `json:"model"`
	Request ModelRequest `json:"request"`
	Retry   RetryPlan    `json:"retry"`
}

// ToolCallRequest is the input of CallTool.
type ToolCallRequest struct {
	Tool      ToolSpec  `json:"tool"`
	Arguments string    `json:"arguments"`
	Retry     RetryPlan `json:"retry"`
	// Compensation is registered in the ledger before the tool is called.
	Compensation *ledger.CompensationRequest `json:"compensation,omitempty"`
	// Compensates is the forward key this call undoes, for a compensation:
	// a rollback fences forward calls, never these.
	Compensates string `json:"compensates,omitempty"`
}

// ToolResult is what a tool call produced.
type ToolResult struct {
	Output string `json:"output"`
	// Replayed is true when the ledger already held the result for this
	// key and the tool was not called again.
	Replayed bool `json:"replayed,omitempty"`
	// Attempt is the attempt that produced this result: the leaf calls the
	// call took.
	Attempt int `json:"attempt"`
}

// RunFinish is the input of RecordRunFinish.
type RunFinish struct {
	WorkflowID string            `json:"workflow_id"`
	Outcome    ledger.RunOutcome `json:"outcome"`
}

// IdempotencyKey is the key of the running activity: workflow ID + "/" +
// the activity ID the workflow set explicitly. It never involves the run ID
// or the attempt, so every attempt and every retry of the run shares it.
func IdempotencyKey(ctx context.Context) string {
	info := activity.GetInfo(ctx)
	return info.WorkflowExecution.ID + "/" + info.ActivityID
}

// CallModel makes one model call.
func (a *Activities) CallModel(ctx context.Context, call ModelCall) (ModelTurn, error) {
	model, err := a.model(call.Model)
	if err != nil {
		return ModelTurn{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeModelConfig, nil)
	}
	var turn ModelTurn
	target := call.Model.Provider
	if call.Model.Name != "" {
		target += ":" + call.Model.Name
	}
	err = a.leafCall(ctx, ledger.LeafModel, target, func() error {
		stop := heartbeat(ctx, activity.GetInfo(ctx).HeartbeatTimeout)
		defer stop()
		turn, err = model.Turn(ctx, call.Request)
		return err
	})
	if err != nil {
		return ModelTurn{}, toActivityError(err)
	}
	// A model's text is untrusted data like a tool's: it reaches history,
	// trace entries and the run's answer in the ledger.
	turn.Content, turn.Refusal = cleanText(turn.Content), cleanText(turn.Refusal)
	for i, tc := range turn.ToolCalls {
		turn.ToolCalls[i].Name, turn.ToolCalls[i].Arguments = cleanText(tc.Name), cleanText(tc.Arguments)
	}
	turn.Attempt = int(activity.GetInfo(ctx).Attempt)
	return turn, nil
}

func (a *Activities) model(spec ModelSpec) (Model, error) {
	switch spec.Provider {
	case ProviderScripted:
		return ScriptedModel{Turns: spec.Script, Finish: spec.ScriptFinish}, nil
	case ProviderOpenAI:
		key, err := a.apiKey(spec)
		if err != nil {
			return nil, err
		}
		return NewOpenAIModel(spec, key, a.HTTPClient)
	case ProviderAnthropic:
		key, err := a.apiKey(spec)
		if err != nil {
			return nil, err
		}
		return NewAnthropicModel(spec, key, a.HTTPClient)
	}
	return nil, fmt.Errorf("model.provider: unknown provider %q", spec.Provider)
}

// apiKey reads the model's key on the worker, from the variable the spec
// names; a local server may need none.
func (a *Activities) apiKey(spec ModelSpec) (string, error) {
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

// CallTool makes one attempt of a tool call through the action ledger. A key
// that already completed returns its stored result without calling the tool;
// a key another attempt holds is waited for while that attempt's lease is
// live; a fenced key (the workflow gave up, the run is rolling back or has
// ended) fails at once with ErrTypeFenced; arguments that are not valid JSON
// or do not match the schema fail at once, before the ledger is touched.
// While the tool runs, the attempt heartbeats and renews its lease on the
// key; it stops as soon as it learns it lost the key.
func (a *Activities) CallTool(ctx context.Context, req ToolCallRequest) (ToolResult, error) {
	if err := req.Tool.CheckArguments(req.Arguments); err != nil {
		return ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidArguments, nil)
	}
	run, err := a.toolRunner(req.Tool)
	if err != nil {
		return ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeUnknownTool, nil)
	}

	info := activity.GetInfo(ctx)
	log := activity.GetLogger(ctx)
	key := IdempotencyKey(ctx)
	lease := leaseLength(info)
	claimedAt := time.Now()
	claim, err := a.claim(ctx, ledger.ActionRequest{
		Key: key, WorkflowID: info.WorkflowExecution.ID, ActivityID: info.ActivityID,
		Tool: req.Tool.Name, Arguments: req.Arguments, Compensation: req.Compensation, Compensates: req.Compensates,
	}, lease)
	switch {
	case errors.Is(err, ledger.ErrConflict):
		return ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeConflict, nil)
	case errors.Is(err, ledger.ErrFenced):
		log.Warn("tool call: the key is fenced; the tool is not called", "key", key, "attempt", info.Attempt, "error", err)
		return ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeFenced, nil)
	case errors.Is(err, ledger.ErrInFlight):
		return ToolResult{}, temporal.NewApplicationError(err.Error(), ErrTypeInFlight)
	case err != nil:
		return ToolResult{}, temporal.NewApplicationError(err.Error(), ErrTypeLedgerUnavailable)
	}
	if !claim.Execute {
		return storedOutcome(claim.Action, int(info.Attempt))
	}

	held := holdLease(ctx, a.Ledger, key, claim.Action.Attempts, lease, claimedAt)
	defer held.stop()
	if err := held.confirm(); err != nil {
		// Paused between the claim and the call for longer than the lease:
		// another attempt may hold the key now, so nothing is sent.
		log.Warn("tool call: the attempt lost its key before calling the tool; the tool is not called", "key", key, "attempt", info.Attempt, "error", err)
		if errors.Is(err, ledger.ErrLeaseLost) {
			return ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeFenced, nil)
		}
		return ToolResult{}, temporal.NewApplicationError(err.Error(), ErrTypeLedgerUnavailable)
	}

	var output string
	callErr := a.leafCall(ctx, ledger.LeafTool, req.Tool.Name, func() error {
		var err error
		output, err = run(held.ctx, ToolInvocation{Key: key, Arguments: json.RawMessage(req.Arguments), Deadline: info.Deadline, Attempt: info.Attempt})
		// Capped and cleaned for every kind of tool before anything reads
		// it: the model, history and the ledger all get the same text.
		output = cleanOutput(output)
		return err
	})
	if callErr != nil {
		if cause := context.Cause(held.ctx); held.ctx.Err() != nil && ctx.Err() == nil && cause != nil {
			callErr = fmt.Errorf("%w (the attempt stopped: %w)", callErr, cause)
		}
		activityErr := toActivityError(callErr)
		errType, permanent := "", false
		var appErr *temporal.ApplicationError
		if errors.As(activityErr, &appErr) {
			errType, permanent = appErr.Type(), appErr.NonRetryable()
		}
		// Recorded even when the attempt was cancelled, so the next attempt
		// can claim the key at once instead of waiting out the lease.
		if _, err := a.Ledger.FailAction(context.WithoutCancel(ctx), key, claim.Action.Attempts, callErr.Error(), errType, permanent); err != nil {
			logRefusedWrite(log, key, err)
		}
		return ToolResult{}, activityErr
	}
	if matcher, _ := req.Tool.refusals(); matcher != nil {
		if reason, refused := matcher.Match(output); refused {
			// The far side said "no" with a 200: stored like a 4xx, so every
			// later attempt gets the same refusal, and never retried.
			message := fmt.Sprintf("tool %s refused: %s", req.Tool.Name, reason)
			if err := a.recordAfterEffect(ctx, key, func(ctx context.Context) error {
				_, err := a.Ledger.FailAction(ctx, key, claim.Action.Attempts, message, ErrTypeRefusal, true)
				return err
			}); err != nil {
				logRefusedWrite(log, key, err)
			}
			return ToolResult{}, temporal.NewNonRetryableApplicationError(message, ErrTypeRefusal, nil)
		}
	}
	var stored ledger.Action
	err = a.recordAfterEffect(ctx, key, func(ctx context.Context) (err error) {
		stored, err = a.Ledger.CompleteAction(ctx, key, claim.Action.Attempts, output)
		return err
	})
	switch {
	case errors.Is(err, ledger.ErrLeaseLost) && stored.Status == ledger.ActionCompleted:
		// Another attempt completed the key first: its result is the one.
		logRefusedWrite(log, key, err)
		return ToolResult{Output: stored.Result, Replayed: true, Attempt: int(info.Attempt)}, nil
	case errors.Is(err, ledger.ErrLeaseLost):
		logRefusedWrite(log, key, err)
		return ToolResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeFenced, nil)
	case err != nil:
		// The tool ran but its result is not stored. The next attempt waits
		// out this lease and runs the tool again under the same key, which an
		// HTTP tool deduplicates by its Idempotency-Key header.
		return ToolResult{}, temporal.NewApplicationError(err.Error(), ErrTypeLedgerUnavailable)
	}
	return ToolResult{Output: stored.Result, Attempt: int(info.Attempt)}, nil
}

// logRefusedWrite reports a ledger write after a tool call that did not
// land: refused because the attempt was superseded or fenced (a WARN: the
// ledger kept the truth of the attempt that holds the key), or failed.
func logRefusedWrite(log interface{ Warn(string, ...any) }, key string, err error) {
	if errors.Is(err, ledger.ErrLeaseLost) {
		log.Warn("ledger: write refused: this attempt no longer holds the key", "key", key, "error", err)
		return
	}
	log.Warn("ledger: could not record a tool's outcome", "key", key, "error", err)
}

// recordAfterEffect makes a ledger write that follows a tool's side
// effect, retrying it while this attempt lasts. The effect has happened;
// an attempt that gave up at the first error would count against the
// call's attempts although the call succeeded, and a Postgres restart of a
// couple of seconds used up all three of a call that had executed
// (TestFaults/PostgresRestart found it), so the model was told a charge
// failed that had gone through. A write refused because the attempt lost
// its key is final.
func (a *Activities) recordAfterEffect(ctx context.Context, key string, write func(context.Context) error) error {
	delay := 100 * time.Millisecond
	for {
		// Each write gets its own bound, so an unreachable host cannot
		// hold the attempt past its deadline.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := write(wctx)
		cancel()
		if err == nil || errors.Is(err, ledger.ErrLeaseLost) {
			return err
		}
		activity.GetLogger(ctx).Warn("ledger: could not record a tool's outcome; retrying while the attempt lasts", "key", key, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func (a *Activities) toolRunner(tool ToolSpec) (func(context.Context, ToolInvocation) (string, error), error) {
	switch tool.Kind {
	case ToolKindHTTP:
		client := a.HTTPClient
		if client == nil {
			client = http.DefaultClient
		}
		return func(ctx context.Context, call ToolInvocation) (string, error) {
			return callHTTPTool(ctx, client, tool, call)
		}, nil
	case ToolKindGo:
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

// storedOutcome turns a settled ledger row into what the first attempt
// returned: its result, or its definitive error with the type it had (a
// refusal replays as a Refusal, so a duplicate delivery escalates too).
func storedOutcome(action ledger.Action, attempt int) (ToolResult, error) {
	if action.Status == ledger.ActionRejected {
		errType := action.ErrorType
		if errType == "" {
			errType = ErrTypeRejected
		}
		return ToolResult{}, temporal.NewNonRetryableApplicationError(action.Error, errType, nil)
	}
	return ToolResult{Output: action.Result, Replayed: true, Attempt: attempt}, nil
}

// heartbeat records a heartbeat at a third of timeout while a tool runs, so
// a lost worker is noticed within the heartbeat timeout and a cancelled
// run's cancellation reaches the call's context. It returns the stop func.
func heartbeat(ctx context.Context, timeout time.Duration) func() {
	if timeout <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		ticker := time.NewTicker(max(timeout/3, 100*time.Millisecond))
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

// claim takes the key, waiting while another attempt holds it: a duplicate
// delivery should not spend one of the call's attempts. It heartbeats while
// it waits, so Temporal knows the attempt is alive, and a waiting attempt
// that Temporal has given up on (a heartbeat answered "not found", a paused
// worker that woke past its deadline) has its context cancelled and stops
// at once, with ErrInFlight.
func (a *Activities) claim(ctx context.Context, req ledger.ActionRequest, lease time.Duration) (ledger.Claim, error) {
	const poll = 250 * time.Millisecond
	for {
		claim, err := a.Ledger.ClaimAction(ctx, req, lease)
		if !errors.Is(err, ledger.ErrInFlight) || ctx.Err() != nil {
			return claim, err
		}
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return ledger.Claim{}, err
		case <-time.After(poll):
		}
	}
}

// errLedgerUnavailable marks an attempt that failed on a ledger write before
// anything left the process.
var errLedgerUnavailable = errors.New("the ledger is unavailable")

// leafCall records one attempt that leaves the process around do.
func (a *Activities) leafCall(ctx context.Context, kind, target string, do func() error) error {
	info := activity.GetInfo(ctx)
	id, err := a.Ledger.BeginLeafCall(ctx, ledger.LeafCall{
		WorkflowID: info.WorkflowExecution.ID, ActivityID: info.ActivityID, Key: IdempotencyKey(ctx),
		Attempt: int(info.Attempt), Kind: kind, Target: target,
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errLedgerUnavailable, err)
	}
	callErr := do()
	if err := a.Ledger.EndLeafCall(context.WithoutCancel(ctx), id, callErr); err != nil {
		activity.GetLogger(ctx).Warn("ledger: could not record end of leaf call", "key", IdempotencyKey(ctx), "error", err)
	}
	return callErr
}

// toActivityError classifies err for Temporal's retry: the one retry loop.
// The message is cleaned because it may quote a tool's or a provider's bytes
// and becomes a protobuf string, which must be valid UTF-8.
func toActivityError(err error) error {
	err = cleanError{err}
	if errors.Is(err, errLedgerUnavailable) {
		// Nothing left the process: the dependency is not to blame.
		return temporal.NewApplicationError(err.Error(), ErrTypeLedgerUnavailable)
	}
	var permanent *PermanentError
	if errors.As(err, &permanent) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeRejected, nil)
	}
	var httpErr *HTTPError
	if errors.As(err, &httpErr) {
		if budget.ClassifyStatus(httpErr.StatusCode, httpErr.ShouldRetry) != budget.Retryable {
			errType := ErrTypeHTTP
			switch httpErr.StatusCode {
			case http.StatusUnauthorized, http.StatusForbidden:
				errType = ErrTypePermission
			case http.StatusNotFound, http.StatusGone:
				errType = ErrTypeNotFound
			}
			return temporal.NewNonRetryableApplicationError(err.Error(), errType, nil, httpErr.StatusCode)
		}
		return temporal.NewApplicationErrorWithOptions(err.Error(), ErrTypeHTTP, temporal.ApplicationErrorOptions{
			NextRetryDelay: httpErr.RetryAfter, Details: []any{httpErr.StatusCode},
		})
	}
	return temporal.NewApplicationError(err.Error(), ErrTypeTransient)
}

// RecordRunStart writes the run's row to the ledger.
func (a *Activities) RecordRunStart(ctx context.Context, run ledger.Run) error {
	info := activity.GetInfo(ctx)
	run.WorkflowID, run.RunID = info.WorkflowExecution.ID, info.WorkflowExecution.RunID
	return a.Ledger.StartRun(ctx, run)
}

// RecordRunFinish writes how the run ended.
func (a *Activities) RecordRunFinish(ctx context.Context, finish RunFinish) error {
	return a.Ledger.FinishRun(ctx, finish.WorkflowID, finish.Outcome)
}

// GiveUp is the input of GiveUpCall: the call the workflow gives up on.
type GiveUp struct {
	Key        string `json:"key"`
	WorkflowID string `json:"workflow_id"`
	ActivityID string `json:"activity_id"`
	Tool       string `json:"tool"`
	Arguments  string `json:"arguments"`
}

// GaveUp is what the ledger knew of a call once the workflow gave up on it.
type GaveUp struct {
	// Status is the action's status: completed means a late attempt did the
	// call after all, and Result is what it returned.
	Status string `json:"status"`
	Result string `json:"result,omitempty"`
	// LeafCalls counts the attempts that left the process, lost ones
	// included.
	LeafCalls int `json:"leaf_calls"`
}

// settlePoll is how often a fence waits for an attempt that still holds a
// live lease.
const settlePoll = 250 * time.Millisecond

// GiveUpCall fences a call's key before the workflow tells the model that
// the call failed: from now on no attempt may claim it. If an attempt still
// holds a live lease, it waits (heartbeating) until that attempt settles,
// so the answer is what happened, not a guess made while it was at work.
func (a *Activities) GiveUpCall(ctx context.Context, g GiveUp) (GaveUp, error) {
	req := ledger.ActionRequest{Key: g.Key, WorkflowID: g.WorkflowID, ActivityID: g.ActivityID, Tool: g.Tool, Arguments: g.Arguments}
	for {
		fenced, err := a.Ledger.FenceAction(ctx, req, ledger.FenceGivenUp)
		if err != nil {
			return GaveUp{}, err
		}
		if !fenced.Live {
			return GaveUp{Status: fenced.Action.Status, Result: fenced.Action.Result, LeafCalls: fenced.LeafCalls}, nil
		}
		if err := waitSettle(ctx); err != nil {
			return GaveUp{}, fmt.Errorf("give up on %s: %w", g.Key, err)
		}
	}
}

// CloseRun begins a run's rollback in the ledger: it fences every forward
// action of the run and of its sub-agents, refuses new claims of them, and
// waits (heartbeating) until no attempt holds a live lease on any of them.
// Only then does the walk read what to compensate.
func (a *Activities) CloseRun(ctx context.Context, workflowID string) error {
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

// RollbackPlanRequest is the input of RollbackPlan.
type RollbackPlanRequest struct {
	WorkflowID string `json:"workflow_id"`
	// IrreversibleTools are the tools whose effects cannot be undone.
	IrreversibleTools []string `json:"irreversible_tools,omitempty"`
}

// RollbackPlan reads what a run's rollback walks: the saga stack of the run
// and its sub-agents, newest first, and what cannot be undone.
func (a *Activities) RollbackPlan(ctx context.Context, req RollbackPlanRequest) (ledger.RollbackPlan, error) {
	return a.Ledger.Plan(ctx, req.WorkflowID, req.IrreversibleTools)
}

// Settlement is the input of SettleCompensation.
type Settlement struct {
	ForwardKey string `json:"forward_key"`
	Status     string `json:"status"`
	Error      string `json:"error,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// SettleCompensation records what became of one compensation.
func (a *Activities) SettleCompensation(ctx context.Context, s Settlement) error {
	return a.Ledger.SettleCompensation(ctx, s.ForwardKey, s.Status, s.Error, s.Reason)
}

// RunStatus is the input of SetRunStatus.
type RunStatus struct {
	WorkflowID string `json:"workflow_id"`
	Status     string `json:"status"`
	Detail     string `json:"detail"`
}

// SetRunStatus records a status the run passes through while it waits.
func (a *Activities) SetRunStatus(ctx context.Context, s RunStatus) error {
	return a.Ledger.SetRunStatus(ctx, s.WorkflowID, s.Status, s.Detail)
}

// cleanError is err with its message passed through cleanText; errors.As
// still finds what it wraps.
type cleanError struct{ err error }

func (e cleanError) Error() string { return cleanText(e.err.Error()) }
func (e cleanError) Unwrap() error { return e.err }
