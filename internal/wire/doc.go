// Package wire owns the contract between the workflows and the engine's
// activities: the names the activities are registered and scheduled under
// ([ActivityCallModel] and the rest, with [Activities] listing them; the
// bare workflow types [AgentRunWorkflow] and [RollbackRunWorkflow]), and
// the values they take and return ([ModelCall], [ToolCallRequest] and
// [ToolResult], [CallFailure], [Settlement], [LimitHold], ...), which the
// ledger records too. Temporal carries them as JSON in the runs'
// histories, so their JSON shape is a replay contract: a field may be
// added, never renamed. No team calls the activities itself: what a team
// reads of a run is in agentsagatype.
package wire
