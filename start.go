package agentsaga

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// StartOptions shape Start.
type StartOptions struct {
	// TaskQueue the run goes to; "" means workflows.TaskQueue.
	TaskQueue string
	// Namespace is the client's namespace, for the search-attribute check;
	// "" means "default".
	Namespace string
	// ModelProviders are custom providers the workers register
	// (Config.Models; Engine.Providers), so that a spec may name them.
	ModelProviders []string
	// Ledger is asked first: an ID it has a run for is refused even when
	// Temporal has forgotten it (a dev server restarted, the retention
	// passed), since the new run would be answered from the old one's
	// stored results. The returned Run reads its Status from it. Start
	// requires it unless SkipLedgerCheck is set; Engine.Start fills it
	// with the engine's.
	Ledger *ledger.Store
	// SkipLedgerCheck starts the run without asking the ledger whether its
	// ID was used, so only Temporal is asked, and Temporal forgets. What it
	// risks: an ID reused after the Temporal server lost its history (a
	// dev server restarted, the retention passed, a namespace recreated)
	// is accepted, and the new run is answered from the old run's ledger
	// rows: its model turns and tool calls share the old run's idempotency
	// keys, so they replay the old results and nothing is sent. Set it only
	// where every ID is new by construction (a random ID per start) and
	// the ledger round trip matters.
	SkipLedgerCheck bool
	// Account charges the run to an account ("acme/support"): each model
	// turn reserves its most expensive outcome against the account's
	// spend caps, and its parents', before it is sent. It is the spec's
	// budget.account when that is empty; a spec that names another
	// account is refused.
	Account string
	// Priority orders the run in its account's admission queue, and its
	// tasks on Temporal servers that honour task priority: 1 goes first,
	// 5 last. Zero keeps the spec's (priority), or 3.
	Priority int
}

// ErrNoLedger is what Start returns for options with neither a Ledger nor
// SkipLedgerCheck: without a ledger to ask, an ID Temporal has forgotten
// would be reused silently. Nothing was started.
var ErrNoLedger = errors.New("no ledger to check the run ID against: set StartOptions.Ledger (or start with Engine.Start), " +
	"or StartOptions.SkipLedgerCheck to accept that an ID reused after Temporal lost its history is answered from the old run's ledger rows")

// RunExistsError is what Start returns for a workflow ID that a run,
// running or closed, already has: a second run under it would share the
// first one's idempotency keys and be answered from its stored results.
// It names the ID, and whether the ledger (StartOptions.Ledger) or
// Temporal knew it. Find it with errors.As.
type RunExistsError struct {
	ID       string
	InLedger bool
}

func (e *RunExistsError) Error() string {
	where := "in Temporal"
	if e.InLedger {
		where = "in the ledger"
	}
	return fmt.Sprintf("agentsaga: start run %s: a run with this ID already exists (%s); pick a new ID", e.ID, where)
}

// InvalidSpecError is what Start returns for a spec that fails validation;
// nothing was started.
type InvalidSpecError struct{ Err error }

func (e *InvalidSpecError) Error() string { return "agentsaga: " + e.Err.Error() }

func (e *InvalidSpecError) Unwrap() error { return e.Err }

// Start validates spec, writes out its defaults (so the run keeps them
// through deploys) and starts it under id as an AgentRunWorkflow, refusing
// an id already used: one Temporal has, and one the ledger has
// (StartOptions.Ledger), which remembers IDs Temporal has forgotten.
// Options with no ledger and no SkipLedgerCheck are ErrNoLedger: a
// reused ID would be answered from the old run's ledger rows.
func Start(ctx context.Context, c client.Client, id string, spec RunSpec, opts StartOptions) (*Run, error) {
	if id == "" {
		return nil, &InvalidSpecError{Err: errors.New("the run ID is empty")}
	}
	resolved, err := resolveFor(spec, opts)
	if err != nil {
		return nil, err
	}
	if opts.Ledger == nil && !opts.SkipLedgerCheck {
		return nil, fmt.Errorf("agentsaga: start run %s: %w", id, ErrNoLedger)
	}
	if opts.Ledger != nil && !opts.SkipLedgerCheck {
		_, err := ledgerdb.Of(opts.Ledger).GetRun(ctx, id)
		if err == nil {
			return nil, &RunExistsError{ID: id, InLedger: true}
		}
		if !errors.Is(err, ledgerdb.ErrNotFound) {
			return nil, fmt.Errorf("agentsaga: start run %s: %w", id, err)
		}
	}
	return startResolved(ctx, c, id, resolved, opts, "", "")
}

// resolveFor is spec with opts' account and priority, resolved
// (RunSpec.ResolveFor), or an *InvalidSpecError.
func resolveFor(spec RunSpec, opts StartOptions) (RunSpec, error) {
	if opts.Account != "" {
		if spec.Budget.Account != "" && spec.Budget.Account != opts.Account {
			return RunSpec{}, &InvalidSpecError{Err: fmt.Errorf("budget.account: the spec charges %s and the start charges %s; name one", spec.Budget.Account, opts.Account)}
		}
		spec.Budget.Account = opts.Account
	}
	if opts.Priority != 0 {
		spec.Priority = opts.Priority
	}
	resolved, err := spec.ResolveFor(opts.ModelProviders...)
	if err != nil {
		return RunSpec{}, &InvalidSpecError{Err: err}
	}
	return resolved, nil
}

// startResolved starts the resolved spec under id, refusing an id
// Temporal has: the part of Start after the checks, which a fork (whose ID
// the ledger has by then) shares. lineage, when set, heads the details the
// Temporal UI shows (a fork's source); forkedFrom, when set, is the
// source's ID, set as the fork's AgentForkedFrom where the namespace has it.
func startResolved(ctx context.Context, c client.Client, id string, resolved RunSpec, opts StartOptions, lineage, forkedFrom string) (*Run, error) {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.TaskQueue == "" {
		opts.TaskQueue = workflows.TaskQueue
	}
	if !resolved.SearchAttributes {
		// Upsert them only where the namespace has them registered, or
		// every workflow task would fail.
		has, err := hasSearchAttributes(ctx, c, opts.Namespace, workflows.InitialSearchAttributes())
		resolved.SearchAttributes = err == nil && has
	}
	summary := resolved.Goal
	if len(summary) > 200 {
		summary = summary[:200] + "..."
	}
	var attributes temporal.SearchAttributes
	if resolved.SearchAttributes {
		attributes = workflows.InitialSearchAttributes()
	}
	if forkedFrom != "" {
		// Set by the starter, never upserted: only a fork's start differs.
		if has, err := hasSearchAttributes(ctx, c, opts.Namespace, workflows.ForkSearchAttributes(false, forkedFrom)); err == nil && has {
			attributes = workflows.ForkSearchAttributes(resolved.SearchAttributes, forkedFrom)
		}
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id,
		// A run's idempotency keys are its workflow ID plus each activity
		// ID, so a second run under a closed run's ID would share its keys
		// and replay its stored results: refused, as an error rather than
		// the SDK's default of handing back the earlier run.
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TaskQueue:                                opts.TaskQueue,
		TypedSearchAttributes:                    attributes,
		Priority:                                 taskPriority(ctx, opts.Ledger, resolved),
		StaticSummary:                            summary,
		StaticDetails: lineage + fmt.Sprintf("**Goal:** %s\n\n**Model:** %s %s\n\n**Budget:** %+v",
			resolved.Goal, resolved.Model.Provider, resolved.Model.Name, resolved.Budget),
	}, AgentRunWorkflow, resolved)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil, &RunExistsError{ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("agentsaga: start run %s: %w", id, err)
	}
	return &Run{ID: id, RunID: run.GetRunID(), c: c, ledger: opts.Ledger}, nil
}

// Start starts a run as the package's Start does, with what the engine
// already holds filling what opts leaves out: its ledger (so an ID any run
// has had is refused, even one Temporal forgot), its task queue and its
// model providers. opts.SkipLedgerCheck still skips the check.
func (e *Engine) Start(ctx context.Context, c client.Client, id string, spec RunSpec, opts StartOptions) (*Run, error) {
	if opts.Ledger == nil {
		opts.Ledger = e.store
	}
	if opts.TaskQueue == "" {
		opts.TaskQueue = e.cfg.TaskQueue
	}
	if opts.ModelProviders == nil {
		opts.ModelProviders = e.Providers()
	}
	return Start(ctx, c, id, spec, opts)
}

// fairnessKeyBytes is the longest fairness key Temporal takes.
const fairnessKeyBytes = 64

// burstRuns is how many runs in flight an account may have and still
// count as sparse: a run started below it has its tasks weigh burstRuns
// times the account's weight on Temporal's fairness keys. The server
// spaces a key's tasks by one over their weight, so an account arriving
// beside a flood with a handful of runs gets them all handed out before
// the flood's next task, instead of one for one with it (FQ-CoDel's new
// flows, by runs). An account over it has its plain weight and its fair
// share: a flood is never boosted past its first burstRuns runs in
// flight.
const burstRuns = 10

// taskPriority is the run's priority on Temporal's task queues, which its
// activities and sub-agents inherit: its priority, and its account as the
// fairness key, weighted by the account's weight (agentsaga queue limit),
// times burstRuns while the account has fewer runs in flight, so that on
// a server that honours fairness one account's backlog does not hold back
// another's tasks. A server without it ignores the keys.
func taskPriority(ctx context.Context, store *ledger.Store, spec RunSpec) temporal.Priority {
	p := temporal.Priority{PriorityKey: cmp.Or(spec.Priority, workflows.DefaultPriority)}
	if account := spec.Budget.Account; account != "" {
		p.FairnessKey = account[:min(len(account), fairnessKeyBytes)]
		if store != nil {
			// The weight is a share, not a permission: without the
			// ledger's answer the account weighs 1.
			if w, inFlight, err := ledgerdb.Of(store).AccountShare(ctx, account, burstRuns); err == nil {
				if inFlight < burstRuns {
					w *= burstRuns
				}
				p.FairnessWeight = float32(w)
			}
		}
	}
	return p
}
