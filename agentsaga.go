package agentsaga

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/admission"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// The engine's vocabulary, under the names a Go team uses.
type (
	// RunSpec is what a run is asked to do, with its budget and tools.
	RunSpec = workflows.RunSpec
	// RunResult is how a run ended.
	RunResult = workflows.RunResult
	// Budget is a run's limits: steps, leaf calls, tokens, USD, seconds.
	Budget = budget.Limits
	// ToolSpec declares a tool a run may call.
	ToolSpec = agentsagatype.ToolSpec
	// ModelSpec names the model a run talks to.
	ModelSpec = agentsagatype.ModelSpec
	// Model is a chat model that can ask for tool calls; one attempt per
	// call (Temporal's retry is the only retry loop).
	Model = activities.Model
	// ModelRequest is one turn's input to a Model.
	ModelRequest = activities.ModelRequest
	// ModelTurn is a Model's answer.
	ModelTurn = agentsagatype.ModelTurn
	// ModelFactory builds a Model from a run's ModelSpec, on the worker.
	ModelFactory = activities.ModelFactory
	// Message is one message of the conversation a Model is sent.
	Message = agentsagatype.Message
	// ToolCall is a call a model asks for (in a ModelTurn) or asked for
	// (in an assistant Message).
	ToolCall = agentsagatype.ToolCall
	// ToolDef is how a tool is described to a model (ModelRequest.Tools).
	ToolDef = agentsagatype.ToolDef
	// Usage is what one model call cost in tokens (ModelTurn.Usage).
	Usage = agentsagatype.Usage
	// BudgetView is a run's budget as its Budget query shows it.
	BudgetView = workflows.BudgetView
	// TraceEntry is one model turn, tool call, sub-agent or compensation
	// of a run's trace.
	TraceEntry = workflows.TraceEntry
)

// defaultBucket names the fleet retry bucket a Config without one pays from.
const defaultBucket = "fleet"

// Config is what an Engine is built from. The zero value is a working
// engine: the default task queue and bucket, the built-in tools and models.
type Config struct {
	// TaskQueue the engine's workflows and activities run on; "" means
	// workflows.TaskQueue ("agentsaga").
	TaskQueue string
	// Bucket names the fleet retry bucket; every worker naming the same
	// bucket shares it. "" means "fleet".
	Bucket string
	// BucketConfig shapes it; zero means budget.DefaultBucket.
	BucketConfig budget.BucketConfig
	// Breaker shapes the circuit breakers; zero means budget.DefaultBreaker.
	Breaker budget.BreakerConfig
	// Tools are the team's Go tools (NewTool), beside the built-in ones.
	Tools []Tool
	// Toolbox holds untyped Go tools (activities.ToolFunc), also added to
	// the built-in ones.
	Toolbox *activities.Toolbox
	// Models are the team's model providers, by the name specs write in
	// model.provider, beside scripted, openai and anthropic.
	Models map[string]ModelFactory
	// HTTPClient carries HTTP tools and model calls; nil means a client
	// with no retries of its own and a five-minute timeout.
	HTTPClient *http.Client
	// LegacyNames also registers the workflows and activities under their
	// bare names (AgentRun, CallTool), for runs in flight that began on a
	// build from before the names were namespaced (`agentsaga worker` sets
	// it). A new deployment leaves it off: with it, a workflow type
	// AgentRun on the worker is the engine's, not the team's.
	LegacyNames bool
	// Observe, when set, sees every retry decision.
	Observe func(plan agentsagatype.RetryPlan, decision string)
	// Temporal is the client the worker polls with. With it, the
	// reconciler's activities are registered too (they find runs that
	// ended behind the engine's back and start their rollbacks), and New
	// makes sure the reconciler runs, as every worker does.
	Temporal client.Client
	// ReconcileEvery is how often the reconciler makes a pass when New
	// starts it; zero means workflows.ReconcileInterval (30 s), negative
	// leaves the reconciler alone (another process makes sure of it).
	ReconcileEvery time.Duration
	// TracerProvider, when set, traces the engine's runs with Temporal's
	// OpenTelemetry interceptor (a span per run, activity and attempt) and
	// agentsaga's own spans inside them (model calls, tool calls,
	// compensations), with the GenAI attributes.
	TracerProvider trace.TracerProvider
}

// Engine is agentsaga inside a team's worker: it registers the workflows
// and activities on a Temporal worker and provides the retry hook that
// worker must run with.
type Engine struct {
	cfg        Config
	store      *ledger.Store
	acts       *activities.Activities
	reconciler *activities.Reconciliation
	hook       *activities.RetryHook
	tracing    []interceptor.WorkerInterceptor
	// stopAdmitting ends the admission loop (nil without Config.Temporal).
	stopAdmitting func()
}

// New builds an engine on store, making sure the fleet bucket's row
// exists and, with Config.Temporal, the reconciler's Schedule (on the
// engine's task queue). A tool or model provider that cannot be
// registered is an error naming it.
func New(ctx context.Context, store *ledger.Store, cfg Config) (*Engine, error) {
	if store == nil {
		return nil, fmt.Errorf("agentsaga: the ledger store is nil (ledger.New(pool) or ledger.Open(ctx, url))")
	}
	if cfg.TaskQueue == "" {
		cfg.TaskQueue = workflows.TaskQueue
	}
	toolbox := activities.Builtins(cfg.Toolbox)
	for _, tool := range cfg.Tools {
		if tool.fn == nil {
			return nil, fmt.Errorf("agentsaga: tool %q was not made by NewTool", tool.spec.Name)
		}
		if err := toolcheck.Validate(tool.spec); err != nil {
			return nil, fmt.Errorf("agentsaga: %w", err)
		}
		if slices.Contains(toolbox.Names(), tool.spec.Name) {
			return nil, fmt.Errorf("agentsaga: tool %q is registered twice (the built-ins are %v)", tool.spec.Name, activities.Builtins(nil).Names())
		}
		toolbox.Register(tool.spec.Name, tool.fn)
	}
	models, err := activities.NewModels(cfg.Models)
	if err != nil {
		return nil, fmt.Errorf("agentsaga: %w", err)
	}
	httpClient := cfg.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 5 * time.Minute}
	}
	hookConfig := activities.RetryHookConfig{Bucket: cfg.Bucket, BucketConfig: cfg.BucketConfig, Breaker: cfg.Breaker, Observe: cfg.Observe}
	if hookConfig.Bucket == "" {
		hookConfig.Bucket = defaultBucket
	}
	if hookConfig.BucketConfig == (budget.BucketConfig{}) {
		hookConfig.BucketConfig = budget.DefaultBucket
	}
	if hookConfig.Breaker == (budget.BreakerConfig{}) {
		hookConfig.Breaker = budget.DefaultBreaker
	}
	db := ledgerdb.Of(store)
	if err := db.EnsureBucket(ctx, hookConfig.Bucket, hookConfig.BucketConfig); err != nil {
		return nil, fmt.Errorf("agentsaga: %w", err)
	}
	e := &Engine{
		cfg:   cfg,
		store: store,
		acts:  &activities.Activities{Ledger: db, Toolbox: toolbox, HTTPClient: httpClient, Models: models},
		hook:  activities.NewRetryHook(db, hookConfig),
	}
	if cfg.TracerProvider != nil {
		tracing, err := tracingInterceptor(cfg.TracerProvider)
		if err != nil {
			return nil, err
		}
		e.tracing = []interceptor.WorkerInterceptor{tracing}
	}
	if cfg.Temporal != nil {
		// Queued runs are told here when the ledger admits them.
		loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			admission.Loop(loopCtx, db, cfg.Temporal, wire.SignalAdmitted, slog.Default())
		}()
		e.stopAdmitting = func() { stop(); <-done }
		e.reconciler = &activities.Reconciliation{Ledger: db, Temporal: cfg.Temporal}
		if cfg.ReconcileEvery >= 0 {
			every := cmp.Or(cfg.ReconcileEvery, workflows.ReconcileInterval)
			if err := ensureReconciler(ctx, cfg.Temporal, cfg.TaskQueue, every); err != nil {
				return nil, err
			}
		}
	}
	return e, nil
}

// Close sends the success bonuses the retry hook has accrued to the fleet
// bucket (they are otherwise sent within a second, too late
// for a store about to close) and ends the engine's MCP sessions (a stdio
// server's stdin is closed, so it exits). Stop the worker first, and close
// the ledger store, which is the caller's, after.
func (e *Engine) Close() error {
	if e.stopAdmitting != nil {
		e.stopAdmitting()
	}
	e.hook.Flush()
	if err := activities.CloseSessions(e.acts); err != nil {
		return fmt.Errorf("agentsaga: close the MCP sessions: %w", err)
	}
	return nil
}

// TaskQueue is the queue the engine's runs go to.
func (e *Engine) TaskQueue() string { return e.cfg.TaskQueue }

// Providers lists the model providers the engine's workers can call, for
// StartOptions.ModelProviders.
func (e *Engine) Providers() []string { return e.acts.Models.Providers() }

// WorkerOptions returns opts with the engine's interceptors added: the
// tracing interceptor first (when Config.TracerProvider is set), so that
// everything after it runs inside the activity's span, then the one that
// keeps a run's sub-agents and continuations under AgentRunWorkflow, and
// the retry hook last.
func (e *Engine) WorkerOptions(opts worker.Options) worker.Options {
	interceptors := append([]interceptor.WorkerInterceptor(nil), e.tracing...)
	opts.Interceptors = append(append(interceptors, opts.Interceptors...), &keepRunType{}, e.hook)
	return opts
}

// Register registers the engine's workflows (AgentRunWorkflow and
// agentsaga.RollbackRun, agentsaga.ReconcilerLoop, agentsaga.Reconciler)
// and its activities under agentsagatype.NamePrefix ("agentsaga.AgentRun",
// "agentsaga.CallTool") on r, a Temporal worker or a workflow test
// environment, and under their bare names too with Config.LegacyNames. The
// worker must run with WorkerOptions' interceptors.
func (e *Engine) Register(r interface {
	worker.WorkflowRegistry
	worker.ActivityRegistry
}) {
	registerWorkflows(r, e.cfg.LegacyNames)
	activities.Register(r, e.acts, e.cfg.LegacyNames)
	if e.reconciler != nil {
		activities.Register(r, e.reconciler, e.cfg.LegacyNames)
	}
}
