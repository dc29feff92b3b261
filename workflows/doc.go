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
// One turn reads in two files: modelturn.go (the model turn: its note,
// its models and fallbacks, its waits for the quota, the spend cap and an
// open breaker, its trace entry) and toolcalls.go (the tool calls it asked
// for: gates and approvals, sends, parking, and the turn's outcome, which
// the loop in agentrun.go acts on). The run's state is run, in
// agentrun.go, with what it carries across continue-as-new (Carried,
// continue.go).
//
// Workflow code is deterministic: no I/O, no wall clock (workflow.Now), no
// global state; everything that touches the world is an activity. A
// change to the commands it emits goes behind workflow.GetVersion, and the
// recorded histories in testdata replay in the tests.
package workflows
