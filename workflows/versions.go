package workflows

import (
	"reflect"
	"runtime"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
)

// The changes to the commands AgentRun emits, each behind
// workflow.GetVersion so that a run in flight replays on new code exactly
// as it ran on the old (the replay corpus in testdata/histories checks
// it). Each version is read once, when an execution starts, and kept on
// the run: an execution that began on old code keeps the old path until
// it ends or continues as new, and every new execution takes the newest.
//
// A new change adds its ID and a field here, and a corpus scenario that
// takes the old path, recorded on the old code before the change.
const (
	// changeGiveUpsTogether fences the keys of a turn's failed calls as
	// each fails, all at once, rather than one after another after every
	// call of the turn before it had settled: a turn whose calls timed out
	// together waited for each straggler's lease in turn.
	changeGiveUpsTogether = "give-ups-together"
	// changeNamespacedActivities schedules agentsaga's activities under
	// their namespaced names (activities.NamePrefix + method: a team's own
	// worker may have an activity called CallTool). Older executions
	// schedule the bare names, which a worker with runs from before the
	// change still registers (activities.Registration.LegacyNames).
	changeNamespacedActivities = "namespaced-activities"
	// changeParkOnOpenBreaker waits out a dependency's open circuit breaker
	// on a durable timer (waitOutBreaker) rather than escalating the run at
	// the first refusal: a short outage is not a human's business.
	changeParkOnOpenBreaker = "park-on-open-breaker"
	// changeLocalBookkeeping records the run's start and finish in the
	// ledger as local activities (run.bookkeeping), not as activity tasks:
	// each is one short Postgres statement, and as a task it cost the
	// server a dispatch and the run a workflow task of its own, 2 of the
	// 14 activities and a sixth of the events of a 10-call run.
	changeLocalBookkeeping = "local-bookkeeping"
)

// versions are the paths this execution takes.
type versions struct {
	giveUpsTogether      bool
	namespacedActivities bool
	parkOnOpenBreaker    bool
	localBookkeeping     bool
}

func readVersions(ctx workflow.Context) versions {
	return versions{
		giveUpsTogether:      workflow.GetVersion(ctx, changeGiveUpsTogether, workflow.DefaultVersion, 1) >= 1,
		namespacedActivities: workflow.GetVersion(ctx, changeNamespacedActivities, workflow.DefaultVersion, 1) >= 1,
		parkOnOpenBreaker:    workflow.GetVersion(ctx, changeParkOnOpenBreaker, workflow.DefaultVersion, 1) >= 1,
		localBookkeeping:     workflow.GetVersion(ctx, changeLocalBookkeeping, workflow.DefaultVersion, 1) >= 1,
	}
}

// activity is the name this execution schedules an activity method under,
// given as a method value (activitiesRef.CallTool) so that a renamed method
// fails to compile rather than to find its activity.
func (v versions) activity(method any) string {
	name := runtime.FuncForPC(reflect.ValueOf(method).Pointer()).Name()
	name = strings.TrimSuffix(name[strings.LastIndex(name, ".")+1:], "-fm")
	if v.namespacedActivities {
		return activities.NamePrefix + name
	}
	return name
}
