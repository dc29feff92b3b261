// Package workflows owns the AgentRun workflow: the loop of model turns and
// the tool calls each turn asks for, the explicit activity IDs that make
// every call's idempotency key (the grammar of
// [activityid.Sub] and its neighbours), the run budget the
// model reads every turn, the graceful finish before the
// budget runs out, escalation to a human, sub-agents, the no-progress
// watchdog, and the way a run ends ([RunResult]).
//
// A run is described by a [RunSpec]. [RunSpec.Resolve] validates it and
// writes every default into it before the run starts ([SpecVersion]), so
// a deploy cannot change what a run in flight does. The other workflows
// are RollbackRun, which walks the stack of a run that ended behind the
// engine's back, and the reconciler ([ReconcilerLoop]) that finds such
// runs.
//
// The run is a small core, run in agentrun.go: the loop of turns, how a
// run ends, and what the turns share (the spec, the budget, the activity
// options). What it decides with is owned by collaborators, each a type
// with its own fields and methods: the conversation, the book of calls
// and the trace (agentrun.go), the watchdog (watchdog.go), the humans
// (humanWaits, humans.go and deadlines.go), the waits (waits.go) and the
// UI (ui.go). What outlives an execution is carried across continue-as-new
// as Carried (continue.go), whose JSON is a replay contract.
//
// A turn is two values that live as long as it does. Its model turn
// (modelTurn: its note, its models and fallbacks, its waits for the quota,
// the spend cap and an open breaker, its trace entry) reads in
// modelturn.go and waits.go. Its tool calls (toolTurn, toolcalls.go: plan,
// send, settle and record, with the gates and approvals of gates.go and
// humans.go, and the sub-agents of subagent.go) end in the turn's
// outcome, which the loop in agentrun.go acts on.
//
// Workflow code is deterministic: no I/O, no wall clock (workflow.Now), no
// global state; everything that touches the world is an activity. A
// change to the commands it emits goes behind workflow.GetVersion, and the
// recorded histories in testdata replay in the tests.
package workflows
