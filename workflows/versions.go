package workflows

import (
	"github.com/agentsaga/agentsaga/agentsagatype"
	"go.temporal.io/sdk/workflow"
)

// The changes to the commands AgentRun emits, each behind
// workflow.GetVersion so that a run in flight replays on new code exactly
// as it ran on the old (the replay corpus in testdata/histories checks
// it). The versions are read once, when an execution starts, and kept on
// the run: an execution that began on old code keeps the old path until
// it ends or continues as new, and every new execution takes the newest.
//
// Every change since the first three is a version of one change ID,
// changeCommands. Each GetVersion a new execution calls costs it a marker
// and an upsert of the TemporalChangeVersion search attribute (two
// events, and a visibility write on the server), so a new execution calls
// one, not one per change. The three older IDs are read only by
// executions that recorded them.
//
// A new change raises latestCommands by one, adds a field here set from
// it, and records a corpus set on the new path (`make record-histories
// SET=commands-N`); the sets before it hold the old paths.
const (
	// changeGiveUpsTogether fences the keys of a turn's failed calls as
	// each fails, all at once, rather than one after another after every
	// call of the turn before it had settled: a turn whose calls timed out
	// together waited for each straggler's lease in turn.
	changeGiveUpsTogether = "give-ups-together"
	// changeNamespacedActivities schedules agentsaga's activities under
	// their namespaced names (agentsagatype.NamePrefix + method: a team's own
	// worker may have an activity called CallTool). Older executions
	// schedule the bare names, which a worker with runs from before the
	// change still registers (activities.Register with legacyNames set,
	// from agentsaga.Config.LegacyNames, which `agentsaga worker` sets).
	changeNamespacedActivities = "namespaced-activities"
	// changeParkOnOpenBreaker waits out a dependency's open circuit breaker
	// on a durable timer (waitOutBreaker) rather than escalating the run at
	// the first refusal: a short outage is not a human's business.
	changeParkOnOpenBreaker = "park-on-open-breaker"

	// changeReplayApprovals decides a replay's approvals from its recording
	// (ActivityRecordedApproval) instead of waiting for a human. Only a run
	// with recorded tools reaches it, so no run recorded before it does; it
	// has an ID of its own so that the runs that do not, the others, carry
	// no marker for it.
	changeReplayApprovals = "replay-approvals"

	// changeCommands is the one change ID of the later changes; its
	// version is the newest change the execution takes, and implies the
	// three above.
	changeCommands = "agentsaga-commands"
	// commandsVersion1 records the run's start and finish in the ledger
	// as local activities (run.bookkeeping), not as activity tasks: each is
	// one short Postgres statement, and as a task it cost the server a
	// dispatch and the run a workflow task of its own. It upserts the
	// search attributes only when the status changes, or when the progress
	// changed and searchProgressInterval has passed (run.showProgress); the
	// first step's values are the starter's (agentsaga.Start). And a call
	// parked behind an open breaker keeps the outage's start across a
	// failed probe, whose refusal does not say it, instead of escalating
	// before the outage has lasted the limit (BreakerWait.ForgetOpenSince).
	// A model turn whose breaker is open waits for it as a tool call does,
	// and asks a human past the limit, where the run used to fail.
	commandsVersion1 workflow.Version = 1
	// commandsVersion2 keeps the watchdog from taking an outage for a
	// loop: a call that waited behind an open breaker, or was refused by
	// one, never makes its turn "nothing new" (watchdog.endTurn). And a
	// model turn refused by the model's open breaker goes to the spec's
	// fallback models in order (model.fallbacks) before it waits. A
	// parked call wakes when the outage reaches
	// escalate.after_breaker_open_seconds, instead of sleeping to a release
	// slot past it (BreakerWait.WakeAtLimit).
	commandsVersion2 workflow.Version = 2
	// commandsVersion3 admits every model turn on its provider's quota,
	// shared by the fleet (ModelCall.Quota), and waits on a durable timer
	// while the quota has no room, or after a 429, instead of retrying
	// (modelTurn.sendInQuota).
	commandsVersion3 workflow.Version = 3
	// commandsVersion4 passes every tool call through its tool's gates
	// before it is sent (toolTurn.gateCall): a per-call limit refuses it, an
	// approval rule (irreversible tools: always) records it in the ledger
	// and waits for a human's approve or deny Update, and a per-run limit
	// holds its amount in the ledger or refuses it.
	commandsVersion4 workflow.Version = 4
	// commandsVersion5 judges a turn by what it did as well as what it
	// read: a successful call, with arguments the run had not used, of a
	// tool that is not read_only is progress whatever it answers (a write
	// acknowledged with {"ok": true} every time), so the watchdog no longer
	// stops a run doing useful work (watchdog.endTurn).
	commandsVersion5 workflow.Version = 5
	// commandsVersion6 names what spent the wall clock when a run ends on
	// it: the waits behind open breakers, for quota and for a human after
	// an escalation, by cause (waitBook), and the approval waits given
	// back. The commands are those of version 5; the reason the run-finish
	// activity records, and the state carried, differ.
	commandsVersion6 workflow.Version = 6
	// commandsVersion7 charges each model turn of a run with an account
	// (budget.account) to that account's spend caps (ModelCall.Spend): its
	// claim reserves the turn's most expensive outcome, and a turn the
	// caps cannot pay for does what the cap says: the run finishes
	// without another model call, waits on a timer for the period to
	// reset, or escalates (run.meetSpendCap).
	commandsVersion7 workflow.Version = 7
	// commandsVersion8 charges each attempt of a priced tool call of a
	// run with an account to the account's spend caps
	// (ToolCallRequest.Spend); a call the caps cannot pay for does what
	// the cap says, as a model turn does (run.waitForToolSpend).
	commandsVersion8 workflow.Version = 8
	// commandsVersion9 admits a run with an account whole before its
	// first turn (run.admit): a local activity asks the ledger, and a run
	// that does not fit under its account's caps and concurrency limits
	// waits, queued, for the signal wire.SignalAdmitted or a recheck timer.
	commandsVersion9 workflow.Version = 9
	// commandsVersion10 gives every wait for a person a deadline (issue
	// 44): an approval's wait ends at its recorded start plus its timeout,
	// whatever the run did meanwhile, and its on_timeout denies the call
	// or aborts the run; an escalation waits at most escalate.timeout and
	// then aborts, finishes or resumes; and either publishes a reminder
	// each remind_every while it waits, and an event when it times out
	// (local activities: run.remind, run.humanTimedOut). A run whose first
	// execution took an older version keeps the older waits across
	// continue-as-new (Carried.Deadlines).
	commandsVersion10 workflow.Version = 10
	// commandsVersion11 admits a fork before its first live turn (issue
	// 45, run.admit): the first execution of a fork charged to an
	// account asks the ledger as a new run does, for its live steps only,
	// and waits queued when its account has no room; a fork taken out of
	// the queue, or cancelled while it waits, walks back the effects it
	// inherited. A fork begun on older code went on at once.
	commandsVersion11 workflow.Version = 11
	latestCommands                     = commandsVersion11
)

// versions are the paths this execution takes.
type versions struct {
	giveUpsTogether      bool
	namespacedActivities bool
	parkOnOpenBreaker    bool
	// The fields below came with commandsVersion1.
	localBookkeeping      bool
	quietSearchAttributes bool
	keepOpenSince         bool
	parkModelTurns        bool
	// The fields below came with commandsVersion2.
	outageAwareWatchdog bool
	modelFallbacks      bool
	wakeAtLimit         bool
	// The field below came with commandsVersion3.
	quotaWaits bool
	// The field below came with commandsVersion4.
	approvals bool
	// The field below came with commandsVersion5.
	effectsProgress bool
	// The field below came with commandsVersion6.
	namesWaits bool
	// The field below came with commandsVersion7.
	spendCaps bool
	// The field below came with commandsVersion8.
	toolSpend bool
	// The field below came with commandsVersion9.
	admission bool
	// The field below came with commandsVersion10.
	deadlines bool
	// The field below came with commandsVersion11.
	forkAdmission bool
}

func readVersions(ctx workflow.Context) versions {
	if commands := workflow.GetVersion(ctx, changeCommands, workflow.DefaultVersion, latestCommands); commands != workflow.DefaultVersion {
		return versions{giveUpsTogether: true, namespacedActivities: true, parkOnOpenBreaker: true,
			localBookkeeping:      commands >= commandsVersion1,
			quietSearchAttributes: commands >= commandsVersion1,
			keepOpenSince:         commands >= commandsVersion1,
			parkModelTurns:        commands >= commandsVersion1,
			outageAwareWatchdog:   commands >= commandsVersion2,
			modelFallbacks:        commands >= commandsVersion2,
			wakeAtLimit:           commands >= commandsVersion2,
			quotaWaits:            commands >= commandsVersion3,
			approvals:             commands >= commandsVersion4,
			effectsProgress:       commands >= commandsVersion5,
			namesWaits:            commands >= commandsVersion6,
			spendCaps:             commands >= commandsVersion7,
			toolSpend:             commands >= commandsVersion8,
			admission:             commands >= commandsVersion9,
			deadlines:             commands >= commandsVersion10,
			forkAdmission:         commands >= commandsVersion11}
	}
	// An execution that began before changeCommands existed (in replay: a
	// new one has its marker).
	return versions{
		giveUpsTogether:      workflow.GetVersion(ctx, changeGiveUpsTogether, workflow.DefaultVersion, 1) >= 1,
		namespacedActivities: workflow.GetVersion(ctx, changeNamespacedActivities, workflow.DefaultVersion, 1) >= 1,
		parkOnOpenBreaker:    workflow.GetVersion(ctx, changeParkOnOpenBreaker, workflow.DefaultVersion, 1) >= 1,
	}
}

// activity is the name this execution schedules an activity under, given
// as one of the agentsagatype.Activity* constants.
func (v versions) activity(name string) string {
	if v.namespacedActivities {
		return agentsagatype.NamePrefix + name
	}
	return name
}
