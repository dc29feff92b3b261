package activities

import (
	"errors"
	"net/http"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// classified is what a failed call is, for Temporal's retry and for the
// retry hook: its error type, whether another attempt may help, and what
// the dependency said (its HTTP status and Retry-After).
type classified struct {
	errType    string
	retryable  bool
	status     int           // the HTTP status, or 0
	retryAfter time.Duration // the server's Retry-After, or 0
	message    string
	// fromActivityError: err was already an activity error (read back,
	// not classified by the table).
	fromActivityError bool
}

// statusErrTypes is the error type of a non-retryable HTTP status; any
// other is ErrTypeHTTP. Whether a status is retryable is
// budget.RetryableStatus's (ARCHITECTURE.md decision 2).
var statusErrTypes = map[int]string{
	http.StatusUnauthorized: wire.ErrTypePermission,
	http.StatusForbidden:    wire.ErrTypePermission,
	http.StatusNotFound:     wire.ErrTypeNotFound,
	http.StatusGone:         wire.ErrTypeNotFound,
}

// classify is the one place an activity's failure is classified: a tool's
// configuration error and a permanentError are not retryable; an HTTP error
// is as budget.RetryableStatus says, typed by statusErrTypes when it is not;
// an activity error (what toActivityError built) is read back; anything
// else is transient and retryable. toActivityError builds activity errors
// from it, and the retry hook reads failures with it.
func classify(err error) classified {
	c := classified{errType: wire.ErrTypeTransient, retryable: true, message: err.Error()}
	var permanent *permanentError
	var httpErr *HTTPError
	var appErr *temporal.ApplicationError
	var protocol *protocolError
	switch {
	case errors.As(err, &protocol):
		c.errType, c.retryable = agentsagatype.ErrTypeProtocol, false
	case isToolConfig(err):
		c.errType, c.retryable = wire.ErrTypeToolConfig, false
	case errors.As(err, &permanent):
		c.errType, c.retryable = wire.ErrTypeRejected, false
	case errors.As(err, &httpErr):
		c.errType, c.status = wire.ErrTypeHTTP, httpErr.StatusCode
		if !budget.RetryableStatus(httpErr.StatusCode, httpErr.ShouldRetry) {
			c.retryable = false
			if errType, ok := statusErrTypes[httpErr.StatusCode]; ok {
				c.errType = errType
			}
		} else {
			c.retryAfter = httpErr.RetryAfter
		}
	case errors.As(err, &appErr):
		c = classified{errType: appErr.Type(), retryable: !appErr.NonRetryable(), status: statusOf(appErr),
			retryAfter: appErr.NextRetryDelay(), message: appErr.Message(), fromActivityError: true}
	}
	return c
}

// ErrorType is what the retry hook makes of a call's error: its error
// type (agentsagatype.ErrType...) and whether another attempt may help.
// It is for tools that call a model outside a run (agentsaga models
// check) and want to say what a run would do.
func ErrorType(err error) (errType string, retryable bool) {
	c := classify(err)
	return c.errType, c.retryable
}
