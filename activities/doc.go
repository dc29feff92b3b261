// Package activities owns every call that leaves the process: model turns
// (scripted, OpenAI-compatible or Anthropic, the last two streamed, SDK
// retries off; see [Model], [NewOpenAIModel], [NewAnthropicModel]) and
// tool calls (Go functions in a [Toolbox], HTTP tools that receive the
// Idempotency-Key header, and MCP tools over streamable HTTP or stdio that
// receive it in _meta; a run lists an MCP server's tools once, at its
// start).
//
// Each call goes through the action ledger under its idempotency key
// (what agentsaga.CallKey reads inside a call), held by a lease that follows the attempt's
// heartbeats, so a key that completed once never executes again and a
// lost or fenced attempt cannot act; each attempt is recorded as a leaf
// call. Model turns read the run's conversation from the ledger and fit
// it to the model's context budget.
//
// [RetryHook] is the activity interceptor that decides every retry: it
// asks the dependency's breaker before an attempt and, after a retryable
// failure, pays for the retry out of the call's, the tool's, the run's and
// the fleet's budgets, or fails the call at once with an error that names
// the budget. An error wrapped by [Permanent] is never retried.
// [Activities] holds the engine's activities, unexported methods that a
// workflow schedules by name (agentsagatype.NamePrefix + "CallTool", ...),
// and [Register] registers them.
package activities
