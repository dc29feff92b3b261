package activities

// Quiet logs. ERROR is for what an operator must act on. A failure a run
// is built to meet (a 503 that is retried, a 400 that is not, a refusal, a
// fenced key, nothing to undo, a budget that says no) is marked benign, so
// the Temporal SDK logs its "Activity error." at DEBUG instead of ERROR,
// and the retry hook logs it once, at WARN, with what it decided. A
// cancelled attempt (a run cancelled, a worker stopping) is benign too.
// The category changes logs and SDK metrics only: the retry, the type and
// the message are what they were, so workflows emit the same commands.

import (
	"errors"

	"github.com/agentsaga/agentsaga/internal/wire"
	"go.temporal.io/sdk/temporal"
)

// expectedTypes are the activity error types of expected, classified
// failures. The rest (a ledger that cannot be reached, a tool or a model
// the worker cannot call as configured, an unclassified error: a bug, a
// connection refused) stay ERROR, except a Transient failure a tool
// reported itself (transientError).
var expectedTypes = map[string]bool{
	wire.ErrTypeHTTP:             true, // classified by its status
	wire.ErrTypePermission:       true, // 401, 403: the run escalates
	wire.ErrTypeNotFound:         true, // 404, 410: for a compensation, nothing to undo
	wire.ErrTypeRefusal:          true,
	wire.ErrTypeRejected:         true, // a Go tool's definitive "no"
	wire.ErrTypeFenced:           true,
	wire.ErrTypeInFlight:         true, // another attempt holds the key: nothing was sent
	wire.ErrTypeInvalidArguments: true, // the model's mistake; it is told
}

// expected reports whether a failure of errType is one a run is built to
// meet.
func expected(errType string) bool { return expectedTypes[errType] }

// categoryFor is the SDK category of a failure of errType.
func categoryFor(errType string) temporal.ApplicationErrorCategory {
	if expected(errType) {
		return temporal.ApplicationErrorCategoryBenign
	}
	return temporal.ApplicationErrorCategoryUnspecified
}

// transientError is the activity error of a retryable failure that no
// classifier recognised (type Transient). It stays ERROR (a ledger that
// cannot be reached, a connection refused, a bug), unless the tool
// reported it itself: a Go tool's returned error, an MCP tool's isError
// marked retryable (toolFailure). The tool answered and said it failed,
// which a run is built to meet, so that one is benign: the retry hook logs
// it at WARN and the SDK's "Activity error." goes to DEBUG. A Go tool that
// panics returns nothing; the SDK logs "Activity panic." at ERROR.
func transientError(err error) error {
	var opts temporal.ApplicationErrorOptions
	var reported *toolFailure
	if errors.As(err, &reported) {
		opts.Category = temporal.ApplicationErrorCategoryBenign
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), wire.ErrTypeTransient, opts)
}

// activityError is temporal.NewApplicationErrorWithOptions with the
// category errType calls for.
func activityError(message, errType string, opts temporal.ApplicationErrorOptions) error {
	opts.Category = categoryFor(errType)
	return temporal.NewApplicationErrorWithOptions(message, errType, opts)
}

// isBenign reports whether the SDK will log err below ERROR. Like the SDK,
// it looks at err itself, not at what err wraps.
func isBenign(err error) bool {
	appErr, ok := err.(*temporal.ApplicationError)
	return ok && appErr.Category() == temporal.ApplicationErrorCategoryBenign
}

// quiet returns err marked benign when it is an expected failure, or when
// the attempt was cancelled. An ApplicationError keeps its message, type,
// retry and cause; one with details is returned as it is, because they
// cannot be copied (the errors toActivityError builds with details are
// classified already, and a cancelled attempt's carry none). Anything else
// is wrapped when cancelled, so errors.Is still finds context.Canceled and
// the SDK still reports the attempt as cancelled.
func quiet(err error, cancelled bool) error {
	if err == nil || isBenign(err) {
		return err
	}
	if appErr, ok := err.(*temporal.ApplicationError); ok {
		if appErr.HasDetails() || !(cancelled || expected(appErr.Type())) {
			return err
		}
		return temporal.NewApplicationErrorWithOptions(appErr.Message(), appErr.Type(), temporal.ApplicationErrorOptions{
			NonRetryable: appErr.NonRetryable(), NextRetryDelay: appErr.NextRetryDelay(), Cause: appErr.Unwrap(),
			Category: temporal.ApplicationErrorCategoryBenign,
		})
	}
	if !cancelled {
		return err
	}
	return temporal.NewApplicationErrorWithOptions(err.Error(), wire.ErrTypeCancelled, temporal.ApplicationErrorOptions{
		Cause: err, Category: temporal.ApplicationErrorCategoryBenign,
	})
}
