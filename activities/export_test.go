package activities

import (
	"context"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// What the external tests (package activities_test) read that the package
// keeps to itself.
var NewHTTPError = newHTTPError

type RetryStore = retryStore

const (
	MaxToolOutput      = maxToolOutput
	TruncationMarker   = truncationMarker
	BreakerStaleness   = breakerStaleness
	DepositLag         = depositLag
	AttrIdempotencyKey = attrIdempotencyKey
	AttrAttempt        = attrAttempt
	AttrRetryDenial    = attrRetryDenial
	AttrCompensates    = attrCompensates
)

// Classification is what classify says of a failure.
type Classification struct {
	ErrType    string
	Retryable  bool
	Status     int
	RetryAfter time.Duration
}

// Classify is classify, for the tests of the errors a call returns.
func Classify(err error) Classification {
	c := classify(err)
	return Classification{ErrType: c.errType, Retryable: c.retryable, Status: c.status, RetryAfter: c.retryAfter}
}

// The providers a spec reaches through the registry, built directly, and
// the tags of the reasoning each keeps, for the package's external tests.
var (
	NewGeminiModel          = newGeminiModel
	NewOpenAIResponsesModel = newOpenAIResponsesModel
)

const (
	ReasoningAnthropic       = reasoningAnthropic
	ReasoningOpenAIResponses = reasoningOpenAIResponses
	ReasoningGemini          = reasoningGemini
)

// The activities the tests execute by function (ExecuteActivity(acts.CallTool,
// ...)): the SDK resolves such a function by its name, and Register with
// legacyNames registers the unexported methods under these bare names.

func (a *Activities) CallTool(ctx context.Context, req ToolCallRequest) (wire.ToolResult, error) {
	return a.callTool(ctx, req)
}

func (a *Activities) CallModel(ctx context.Context, call wire.ModelCall) (agentsagatype.ModelTurn, error) {
	return a.callModel(ctx, call)
}

func (a *Activities) RequestApproval(ctx context.Context, req agentsagatype.ApprovalRequest) (agentsagatype.Approval, error) {
	return a.requestApproval(ctx, req)
}

func (a *Activities) DecideApproval(ctx context.Context, d wire.ApprovalDecision) (agentsagatype.Approval, error) {
	return a.decideApproval(ctx, d)
}

func (a *Activities) PublishWaitEvent(ctx context.Context, e wire.WaitEvent) error {
	return a.publishWaitEvent(ctx, e)
}

func (a *Activities) ListMCPTools(ctx context.Context, server agentsagatype.ToolSpec) ([]agentsagatype.ToolSpec, error) {
	return a.listMCPTools(ctx, server)
}
