package agentsaga

import (
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/workflows"
)

// AgentRunWorkflow is the type of a run: Start starts it, and a run's
// sub-agents and continuations keep it. The engine's workflow types are
// namespaced as its activities are (agentsagatype.NamePrefix), so that they
// share a worker with a team's own workflows: a team may have a workflow
// called AgentRun.
const AgentRunWorkflow = agentsagatype.NamePrefix + "AgentRun"

// The engine's other workflow types, namespaced alike.
const (
	// rollbackRunWorkflow walks the stack of a run that ended behind the
	// engine's back.
	rollbackRunWorkflow = agentsagatype.NamePrefix + "RollbackRun"
	// reconcilerWorkflow is a reconciler pass, which the reconciler's
	// Schedule started before reconcilerLoopWorkflow.
	reconcilerWorkflow = agentsagatype.NamePrefix + "Reconciler"
	// reconcilerLoopWorkflow is the reconciler (ensureReconciler).
	reconcilerLoopWorkflow = agentsagatype.NamePrefix + "ReconcilerLoop"
)

// agentRun is workflows.AgentRun under a Go name of its own. The SDK maps
// a registered function's short name to the name it is registered under
// (registration aliasing), so registering workflows.AgentRun itself would
// send every workflow of type "AgentRun" on the worker, a team's own
// included, to the engine.
func agentRun(ctx workflow.Context, spec RunSpec) (RunResult, error) {
	return workflows.AgentRun(ctx, spec)
}

// registerWorkflows registers the engine's workflows under their
// namespaced names, and with legacy under the bare names too, which the
// runs started by builds from before the prefix have as their type.
//
// RollbackRun and Reconciler are registered as themselves: the SDK's
// alias also sends their bare names to them, which the reconciler's
// rollbacks (activities.StartRollback) and Schedules made by older builds
// start.
func registerWorkflows(r worker.WorkflowRegistry, legacy bool) {
	r.RegisterWorkflowWithOptions(agentRun, workflow.RegisterOptions{Name: AgentRunWorkflow})
	r.RegisterWorkflowWithOptions(workflows.RollbackRun, workflow.RegisterOptions{Name: rollbackRunWorkflow})
	r.RegisterWorkflowWithOptions(workflows.Reconciler, workflow.RegisterOptions{Name: reconcilerWorkflow})
	r.RegisterWorkflowWithOptions(workflows.ReconcilerLoop, workflow.RegisterOptions{Name: reconcilerLoopWorkflow})
	if legacy {
		r.RegisterWorkflow(workflows.AgentRun)
		r.RegisterWorkflow(workflows.RollbackRun)
		r.RegisterWorkflow(workflows.Reconciler)
	}
}

// keepRunType is the worker interceptor that keeps a namespaced run's
// sub-agents and continuations under AgentRunWorkflow. The workflow code
// names them by the function workflows.AgentRun, which the SDK resolves
// to "AgentRun" (or to whatever a team's function called AgentRun is
// registered as). A run whose type is the bare "AgentRun" (a legacy run)
// is left as it is, so its commands are those it always emitted. Replay
// compares a child's type by the part after the last dot, so a history
// replays with or without this interceptor.
type keepRunType struct {
	interceptor.WorkerInterceptorBase
}

func (*keepRunType) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	if workflow.GetInfo(ctx).WorkflowType.Name != AgentRunWorkflow {
		return next
	}
	return &runTypeInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type runTypeInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *runTypeInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&runTypeOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}})
}

type runTypeOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
}

// ExecuteChildWorkflow: a run's only children are its sub-agents, runs
// themselves.
func (o *runTypeOutbound) ExecuteChildWorkflow(ctx workflow.Context, _ string, args ...any) workflow.ChildWorkflowFuture {
	return o.Next.ExecuteChildWorkflow(ctx, AgentRunWorkflow, args...)
}

// NewContinueAsNewError and NewContinueAsNewErrorWithOptions: a run
// continues as itself.
func (o *runTypeOutbound) NewContinueAsNewError(ctx workflow.Context, _ any, args ...any) error {
	return o.Next.NewContinueAsNewError(ctx, AgentRunWorkflow, args...)
}

func (o *runTypeOutbound) NewContinueAsNewErrorWithOptions(ctx workflow.Context, options workflow.ContinueAsNewErrorOptions, _ any, args ...any) error {
	return o.Next.NewContinueAsNewErrorWithOptions(ctx, options, AgentRunWorkflow, args...)
}
