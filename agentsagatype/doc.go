// Package agentsagatype holds the types every room of agentsaga shares, so
// that workflow code can use all of them without reaching anything that
// does I/O: it imports the standard library only (TestWorkflowsImportNoIO
// in package workflows checks what the workflow reaches).
//
// What it holds:
//   - statuses: a run's ([RunRunning], [RunCompleted], [RunPartial],
//     [RunEscalated], [RunCompensated], [RunNeedsAttention], [RunFailed],
//     [RunTerminated]), an action's ([ActionStarted] and the rest) and a
//     compensation's ([CompensationRegistered] and the rest);
//   - the error type names the activities return and the workflow and
//     operators read ([ErrTypeInvalidArguments], [ErrTypeFenced],
//     [ErrTypePermission], ...);
//   - the conversation's shape: [Message], [ToolCall], [ToolDef] and
//     [Usage];
//   - specs as data: [ModelSpec] (with its [RateLimit]), [ToolSpec] (with
//     its [CompensationSpec], [ApprovalSpec], [LimitSpec] and its
//     refusal rules, [RefusalRule]), and a scripted model's [ScriptedTurn];
//   - the inputs and outputs of the engine's activities, such as
//     [ModelCall] and [ModelTurn], [ToolCallRequest] and [ToolResult],
//     [Approval] and [Settlement];
//   - the names the engine registers under, with their [NamePrefix]:
//     [AgentRunWorkflow], [RollbackRunWorkflow], [Activities] and the
//     [ActivityCallModel] family;
//   - small helpers every room needs the same way: [CallKey], which makes
//     a call's idempotency key from its workflow ID and activity ID, and
//     [Preview], [Digest] and [Clip] for what history carries.
package agentsagatype
