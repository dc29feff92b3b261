package activities

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
