package agentsagatype

// NamePrefix namespaces agentsaga's activities in a worker's registry
// (agentsaga.CallTool), so that they share a worker with a team's own.
const NamePrefix = "agentsaga."

// RollbackRunWorkflow is the workflow type (workflows.RollbackRun) that walks
// the compensation stack of a run that ended behind the engine's back. It
// runs under the run's own workflow ID, so its compensations get the keys
// the run's own walk would have used.
const RollbackRunWorkflow = "RollbackRun"

// AgentRunWorkflow is the bare workflow type of a run (workflows.AgentRun),
// which runs started before the names were namespaced still have; a new
// run's type is NamePrefix + this (agentsaga.AgentRunWorkflow).
const AgentRunWorkflow = "AgentRun"

// The engine's activities, by the names of the methods that implement them
// (activities.Activities and activities.Reconciliation). A worker registers
// each under NamePrefix + its name; the workflows schedule them by these
// constants, and a test in activities checks that each names a method and
// that every method has one.
const (
	ActivityCallModel          = "CallModel"
	ActivityCallTool           = "CallTool"
	ActivityCloseRun           = "CloseRun"
	ActivityGiveUpCall         = "GiveUpCall"
	ActivityListMCPTools       = "ListMCPTools"
	ActivityReadResult         = "ReadResult"
	ActivityRecordRunFinish    = "RecordRunFinish"
	ActivityRecordRunStart     = "RecordRunStart"
	ActivityRollbackPlan       = "RollbackPlan"
	ActivitySetRunStatus       = "SetRunStatus"
	ActivitySettleCompensation = "SettleCompensation"
	ActivityFindAbandonedRuns  = "FindAbandonedRuns"
	ActivityFinishSubRuns      = "FinishSubRuns"
	ActivityReadTerminatedRun  = "ReadTerminatedRun"
	ActivityStartRollback      = "StartRollback"
	ActivityRequestApproval    = "RequestApproval"
	ActivityDecideApproval     = "DecideApproval"
	ActivityHoldLimit          = "HoldLimit"
)

// Activities lists every activity name above.
var Activities = []string{
	ActivityCallModel, ActivityCallTool, ActivityCloseRun, ActivityGiveUpCall, ActivityListMCPTools,
	ActivityReadResult, ActivityRecordRunFinish, ActivityRecordRunStart, ActivityRollbackPlan,
	ActivitySetRunStatus, ActivitySettleCompensation, ActivityFindAbandonedRuns, ActivityFinishSubRuns,
	ActivityReadTerminatedRun, ActivityStartRollback, ActivityRequestApproval, ActivityDecideApproval,
	ActivityHoldLimit,
}

// CallKey is the idempotency key of a call: the run's workflow ID and the
// activity ID the workflow gave the call's first activity. It never
// involves the run ID or the attempt, so every attempt, retry and
// continuation of the run that sends the call shares it.
func CallKey(workflowID, activityID string) string {
	return workflowID + "/" + activityID
}

// The _meta fields every MCP tool call carries, so that a server can
// recognise a retry of a call it already made: the idempotency key is the
// same on every attempt (CallKey), the attempt is Temporal's, 1 for the
// first.
const (
	MCPMetaIdempotencyKey = "agentsaga/idempotency_key"
	MCPMetaAttempt        = "agentsaga/attempt"
)
