package agentsagatype

// NamePrefix namespaces agentsaga's activities in a worker's registry
// (agentsaga.CallTool), so that they share a worker with a team's own.
const NamePrefix = "agentsaga."

// The _meta fields every MCP tool call carries, so that a server can
// recognise a retry of a call it already made: the idempotency key (the
// run's workflow ID and the call's activity ID, agentsaga.CallKey inside a
// Go tool) is the same on every attempt, the attempt is Temporal's, 1 for
// the first.
const (
	MCPMetaIdempotencyKey = "agentsaga/idempotency_key"
	MCPMetaAttempt        = "agentsaga/attempt"
)
