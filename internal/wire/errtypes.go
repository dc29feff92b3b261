package wire

// Application error types the activities return, for the workflow (which
// decides on them) and for operators reading failures in the UI, where
// they show as the strings; ErrTypeProtocol, which a team's tooling reads
// too, is agentsagatype's.
const (
	ErrTypeInvalidArguments = "InvalidArguments"
	ErrTypeUnknownTool      = "UnknownTool"
	ErrTypeConflict         = "IdempotencyConflict"
	ErrTypeInFlight         = "InFlight"
	ErrTypeRejected         = "Rejected"
	ErrTypeHTTP             = "HTTPError"
	ErrTypeTransient        = "Transient"
	ErrTypeModelConfig      = "ModelConfig"
	ErrTypeRefusal          = "Refusal"
	ErrTypePermission       = "PermissionDenied" // HTTP 401 or 403
	ErrTypeNotFound         = "NotFound"         // HTTP 404 or 410: for a compensation, nothing to undo
	// ErrTypeFenced: the key no longer accepts this attempt (the workflow
	// gave up on the call, the run is rolling back or has ended, or another
	// attempt took the key over). Nothing was sent.
	ErrTypeFenced = "Fenced"
)

// ErrTypeRunNotFound marks a rollback of a run the ledger has no row for.
const ErrTypeRunNotFound = "RunNotFound"

// ErrTypeLedgerUnavailable marks an attempt that failed because the shared
// retry state could not be read. No leaf call left the process for it.
const ErrTypeLedgerUnavailable = "LedgerUnavailable"

// ErrTypePayloadTooLarge is the error type of a payload over
// internal/payload's limit.
const ErrTypePayloadTooLarge = "PayloadTooLarge"

// ErrTypeMCPTools is the error type of a server listing the run cannot
// use: a tool that allow names is missing, or a tool whose schema or name
// does not fit. Listing again would get the same answer.
const ErrTypeMCPTools = "MCPTools"

// ErrTypeToolConfig marks a tool the worker cannot call as configured (a
// header names an environment variable that is not set): an operator must
// act, and no retry can help.
const ErrTypeToolConfig = "ToolConfig"

// ErrTypeCancelled is the type of a cancelled attempt's error that was not
// an ApplicationError already.
const ErrTypeCancelled = "Cancelled"

// ErrTypeApprovalDecided is the error of a decision on an approval another
// decision settled first; its message names who decided.
const ErrTypeApprovalDecided = "ApprovalDecided"

// ErrTypeNotRecorded is the error of a replay's call that the recorded run
// holds no answer for: the model reads it, and nothing is sent.
const ErrTypeNotRecorded = "NotRecorded"
