package workflows

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The typed search attributes a run keeps up to date, for the Temporal
// UI's list and filters (e.g. `AgentStatus = "escalated"`). They outlive
// the worker, unlike queries. A namespace must have them registered:
// `agentsaga dev` does; on a production cluster run
//
//	temporal operator search-attribute create --namespace NS \
//	  --name AgentStatus --type Keyword --name StepsUsed --type Int \
//	  --name LeafCalls --type Int --name USDSpent --type Double --name Amplification --type Double \
//	  --name AgentForkedFrom --type Keyword
var (
	agentStatusKey   = temporal.NewSearchAttributeKeyKeyword("AgentStatus")
	stepsUsedKey     = temporal.NewSearchAttributeKeyInt64("StepsUsed")
	leafCallsKey     = temporal.NewSearchAttributeKeyInt64("LeafCalls")
	usdSpentKey      = temporal.NewSearchAttributeKeyFloat64("USDSpent")
	amplificationKey = temporal.NewSearchAttributeKeyFloat64("Amplification")
	// agentForkedFromKey links a fork to its source (docs/forks.md):
	// `AgentForkedFrom = "RUN"` lists the forks of RUN. The fork's starter
	// sets it (agentsaga's Run.Fork) and no workflow ever upserts it, so
	// it adds no command to any run's history, and continue-as-new keeps
	// it.
	agentForkedFromKey = temporal.NewSearchAttributeKeyKeyword("AgentForkedFrom")
)

// SearchAttributes lists the attributes with zero values, for registering
// them on a dev server.
func SearchAttributes() temporal.SearchAttributes {
	return temporal.NewSearchAttributes(append(searchProgress{}.updates(), agentForkedFromKey.ValueSet(""))...)
}

// ForkSearchAttributes are a fork's search attributes at its start:
// progress (as InitialSearchAttributes, when the run keeps it) and its
// source. Either may be left out: a namespace without AgentForkedFrom
// registered still gets the progress.
func ForkSearchAttributes(progress bool, source string) temporal.SearchAttributes {
	var updates []temporal.SearchAttributeUpdate
	if progress {
		updates = searchProgress{status: agentsagatype.RunRunning}.updates()
	}
	if source != "" {
		updates = append(updates, agentForkedFromKey.ValueSet(source))
	}
	return temporal.NewSearchAttributes(updates...)
}

// Queries a run answers while a worker is up.
const (
	queryLedger = "ledger"
	QueryTrace  = "trace"
)

// ledgerEntry is one action as the workflow saw it: the ledger query's
// answer. The ledger itself (agentsaga show) is the record of truth.
type ledgerEntry struct {
	Key      string `json:"idempotency_key"`
	Tool     string `json:"tool"`
	Outcome  string `json:"outcome"`
	Attempts int    `json:"attempts"`
}

func (r *run) registerQueries(ctx workflow.Context) error {
	if err := workflow.SetQueryHandlerWithOptions(ctx, QueryBudget, func() (BudgetView, error) {
		now := workflow.Now(ctx)
		return BudgetView{
			Limits: r.budget.Limits, Used: r.budget.Used, Remaining: r.budget.Remaining(now),
			FractionLeft: r.budget.FractionLeft(now), ShouldFinish: r.budget.ShouldFinish(now),
			Note: r.budget.Note(now, r.calls.openBreakers()), Retries: r.calls.finalStats(r.budget.Used.LeafCalls),
		}, nil
	}, workflow.QueryHandlerOptions{Description: "The run budget: limits, used, remaining, the note the model reads, retry counters."}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandlerWithOptions(ctx, QueryTrace, func() ([]TraceEntry, error) {
		return r.trace.Trace, nil
	}, workflow.QueryHandlerOptions{Description: "Every model turn, tool call, sub-agent and compensation so far, in order."}); err != nil {
		return err
	}
	return workflow.SetQueryHandlerWithOptions(ctx, queryLedger, func() ([]ledgerEntry, error) {
		var entries []ledgerEntry
		for _, e := range r.trace.Trace {
			if e.ActivityID == "" || e.Kind == "model" {
				continue
			}
			outcome := "completed"
			if e.Error != "" {
				outcome = "failed: " + clip(e.Error, 120)
			}
			entries = append(entries, ledgerEntry{Key: activityid.Key(r.workflowID, e.ActivityID), Tool: e.Tool, Outcome: outcome, Attempts: e.Attempts})
		}
		return entries, nil
	}, workflow.QueryHandlerOptions{Description: "The run's actions under their idempotency keys, as the workflow saw them."})
}

// showProgress refreshes what the UI shows of a running run: its current
// details in Markdown and, when enabled, its search attributes.
func (r *run) showProgress(ctx workflow.Context, status, headline, note string) {
	var details strings.Builder
	fmt.Fprintf(&details, "## %s\n\n%s\n\n```\n%s\n```\n\n", status, headline, note)
	stats := r.calls.finalStats(r.budget.Used.LeafCalls)
	fmt.Fprintf(&details, "**Calls** %d · **leaf calls** %d · **retries** %d · **amplification** %.2f\n\n",
		stats.Calls, r.budget.Used.LeafCalls, stats.Retries, stats.Amplification)
	if open := r.calls.openBreakers(); len(open) > 0 {
		fmt.Fprintf(&details, "**Open breakers:** %s\n\n", strings.Join(open, ", "))
	}
	if r.ui.answeredBy != "" && r.ui.answeredBy != r.spec.Model.Target() {
		fmt.Fprintf(&details, "**Last turn answered by:** %s (fallback for %s)\n\n", r.ui.answeredBy, r.spec.Model.Target())
	}
	if last := r.trace.lastError(); last != "" {
		fmt.Fprintf(&details, "**Last error:** %s\n\n", clip(last, 300))
	}
	if spent := r.waits.withWaits("", "the wall clock"); spent != "" {
		fmt.Fprintf(&details, "**Waits:** %s\n\n", strings.TrimPrefix(spent, "; "))
	}
	if len(r.watchdog.turns) > 0 {
		fmt.Fprintf(&details, "**Watchdog:** %d voluntary retries, %d turns without new information\n", r.watchdog.totalVoluntary(), r.watchdog.stale)
	}
	workflow.SetCurrentDetails(ctx, details.String())
	if !r.spec.SearchAttributes {
		return
	}
	progress := searchProgress{status: status, steps: int64(r.budget.Used.Steps), leafCalls: int64(r.budget.Used.LeafCalls),
		usd: r.budget.Used.USD, amplification: stats.Amplification}
	now := workflow.Now(ctx)
	if current, set := searchProgressOf(workflow.GetTypedSearchAttributes(ctx)); r.versions.quietSearchAttributes &&
		!progressDue(current, set, progress, now.Sub(r.ui.progressShown)) {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, progress.updates()...); err != nil {
		workflow.GetLogger(ctx).Warn("could not update search attributes", "error", err)
	}
	r.ui.progressShown = now
}

// searchProgressInterval is how often a run's search attributes follow its
// steps, leaf calls and spend while its status stays the same. Each upsert
// is an event in the run's history and a write to the server's visibility
// store, so a fleet of long runs upserting every step would load it for
// figures the current details already show every step. A change of status
// (escalated, completed, ...) is upserted at once.
const searchProgressInterval = 10 * time.Second

// uiState is what the Temporal UI was last shown of a run.
type uiState struct {
	// answeredBy is the model that answered the last turn
	// (agentsagatype.ModelSpec.Target).
	answeredBy string
	// progressShown is when the search attributes last got the run's
	// progress: this execution's start (a starter sets them, and
	// continue-as-new carries them), then each upsert (showProgress).
	progressShown time.Time
}

// progressDue says whether the search attributes, which say current (set:
// they say anything), should now say next, sinceShown after the run last
// upserted them (or started with them).
func progressDue(current searchProgress, set bool, next searchProgress, sinceShown time.Duration) bool {
	switch {
	case !set || current.status != next.status:
		return true
	case current == next:
		return false
	}
	return sinceShown >= searchProgressInterval
}

// searchProgress is what a run's search attributes say of it.
type searchProgress struct {
	status             string
	steps, leafCalls   int64
	usd, amplification float64
}

// searchProgressOf reads it from the execution's search attributes, and
// whether they have it: a run started without them gets them at its first
// step.
func searchProgressOf(attributes temporal.SearchAttributes) (searchProgress, bool) {
	var p searchProgress
	status, ok := attributes.GetKeyword(agentStatusKey)
	if !ok {
		return p, false
	}
	p.status = status
	p.steps, _ = attributes.GetInt64(stepsUsedKey)
	p.leafCalls, _ = attributes.GetInt64(leafCallsKey)
	p.usd, _ = attributes.GetFloat64(usdSpentKey)
	p.amplification, _ = attributes.GetFloat64(amplificationKey)
	return p, true
}

func (p searchProgress) updates() []temporal.SearchAttributeUpdate {
	return []temporal.SearchAttributeUpdate{agentStatusKey.ValueSet(p.status), stepsUsedKey.ValueSet(p.steps),
		leafCallsKey.ValueSet(p.leafCalls), usdSpentKey.ValueSet(p.usd), amplificationKey.ValueSet(p.amplification)}
}

// InitialSearchAttributes are a run's search attributes as its first step
// would set them: a starter that sets them (agentsaga.Start does) shows the
// run as running from its start, and saves the run that upsert.
func InitialSearchAttributes() temporal.SearchAttributes {
	return ForkSearchAttributes(true, "")
}

func (t *trace) lastError() string {
	for i := len(t.Trace) - 1; i >= 0; i-- {
		if t.Trace[i].Error != "" {
			return t.Trace[i].Tool + ": " + t.Trace[i].Error
		}
	}
	return ""
}
