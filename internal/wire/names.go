package wire

// RollbackRunWorkflow is the workflow type (workflows.RollbackRun) that walks
// the compensation stack of a run that ended behind the engine's back. It
// runs under the run's own workflow ID, so its compensations get the keys
// the run's own walk would have used.
const RollbackRunWorkflow = "RollbackRun"

// AgentRunWorkflow is the bare workflow type of a run (workflows.AgentRun),
// which runs started before the names were namespaced still have; a new
// run's type is NamePrefix + this (agentsaga.AgentRunWorkflow).
const AgentRunWorkflow = "AgentRun"

// The engine's activities, by name: activities.Register registers each
// (an unexported method of activities.Activities or
// activities.Reconciliation) under NamePrefix + its name, the workflows
// schedule them by these constants, and a test in activities checks that
// Register's table holds exactly these names.
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
	// ActivityAdmitRun puts a run in its account's admission queue, or
	// reads where it stands there (agentsaga-commands 9).
	ActivityAdmitRun = "AdmitRun"
	// ActivityRecordedApproval decides a replay's approval as the recording
	// did (agentsaga replay): no human is asked.
	ActivityRecordedApproval = "RecordedApproval"
	// ActivityPublishWaitEvent publishes a wait for a person's reminder,
	// or its timeout, to the run's event log (agentsaga-commands 10).
	ActivityPublishWaitEvent = "PublishWaitEvent"
)

// Activities lists every activity name above.
var Activities = []string{
	ActivityCallModel, ActivityCallTool, ActivityCloseRun, ActivityGiveUpCall, ActivityListMCPTools,
	ActivityReadResult, ActivityRecordRunFinish, ActivityRecordRunStart, ActivityRollbackPlan,
	ActivitySetRunStatus, ActivitySettleCompensation, ActivityFindAbandonedRuns, ActivityFinishSubRuns,
	ActivityReadTerminatedRun, ActivityStartRollback, ActivityRequestApproval, ActivityDecideApproval,
	ActivityHoldLimit, ActivityRecordedApproval, ActivityAdmitRun, ActivityPublishWaitEvent,
}
