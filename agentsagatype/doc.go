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
//   - the error type of a model server that speaks another protocol
//     ([ErrTypeProtocol]), which a team's tooling reads;
//   - the conversation's shape: [Message], [ToolCall], [ToolDef] and
//     [Usage];
//   - specs as data: [ModelSpec] (with its [RateLimit]), [ToolSpec] (with
//     its [CompensationSpec], [ApprovalSpec], [LimitSpec] and its
//     refusal rules, [RefusalRule]), and a scripted model's [ScriptedTurn];
//   - the records a team reads of a run: [Run] and its [RunOutcome], an
//     [Action] and a [Compensation] of its stack, an [Approval], and the
//     [RetryPlan] a retry decision is made on (agentsaga.Config.Observe);
//   - the prefix the engine registers its workflows and activities under
//     ([NamePrefix]), and the _meta keys an MCP server reads the
//     idempotency key from ([MCPMetaIdempotencyKey]).
//
// What only the rooms exchange is internal: the activities' inputs and
// outputs, their names and the error types they return (internal/wire),
// the activity-ID and key grammar (internal/activityid), and the previews
// and digests history carries (internal/textclip).
package agentsagatype
