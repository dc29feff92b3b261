package activities

import "time"

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
