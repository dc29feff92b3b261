package workflows

import (
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// errorKind is what one type of application error means to the workflow
// when a call fails with it. A type the table does not list means the
// defaults: an attempt may have claimed the call's key, and the error goes
// back to the model to work with.
type errorKind struct {
	// unclaimed: no attempt of the call claimed its key (every attempt
	// fails this check alike before the ledger, or the key is another
	// request's), so there is nothing to give up and fence.
	unclaimed bool
	// asksHuman, when set, brings in a human at once, whatever the count
	// of failures: a format of the tool's name and the error's message.
	asksHuman string
	// nothingToUndo: a compensation found no trace of its forward action.
	nothingToUndo bool
}

// errorKinds is the workflow's one table of error types.
var errorKinds = map[string]errorKind{
	wire.ErrTypeInvalidArguments: {unclaimed: true},
	wire.ErrTypeUnknownTool:      {unclaimed: true},
	wire.ErrTypeConflict:         {unclaimed: true},
	wire.ErrTypeRefusal:          {asksHuman: "Tool %s refused: %s"},
	wire.ErrTypePermission:       {asksHuman: "Tool %s was denied permission: %s"},
	wire.ErrTypeNotFound:         {nothingToUndo: true},
}

// failure is how the workflow reads a failed call's error.
type failure struct {
	errorKind
	// cancelled: the call was cancelled with the run; the rollback fences
	// its key, and it is no tool's failure.
	cancelled bool
	// message is the error's own text (errorText).
	message string
}

// classify reads err, the error a call failed with, through errorKinds.
func classify(err error) failure {
	f := failure{cancelled: temporal.IsCanceledError(err)}
	if err == nil {
		return f
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		f.errorKind = errorKinds[appErr.Type()]
	}
	f.message = errorText(err)
	return f
}

// mayHaveClaimed says whether some attempt of the failed call may have
// claimed its key, which the workflow must then fence before the model
// hears of the failure: every failure but a cancellation (the rollback
// fences those) and the kinds that claim nothing.
func (f failure) mayHaveClaimed() bool { return !f.unclaimed && !f.cancelled }

// callFailure reads how many attempts a failed call took and which budget
// refused it, from the details the retry hook attaches. A failure the hook
// never saw (a timeout of a lost worker) counts one attempt.
func callFailure(err error) (attempts int, denial string) {
	if failure, ok := callFailureIn(err); ok {
		return max(failure.Attempt, 1), failure.Denial
	}
	return 1, ""
}

// callFailureIn is the wire.CallFailure the retry hook put in err's
// details, when err carries one.
func callFailureIn(err error) (wire.CallFailure, bool) {
	var appErr *temporal.ApplicationError
	var failure wire.CallFailure
	if err == nil || !errors.As(err, &appErr) || !appErr.HasDetails() || appErr.Details(&failure) != nil {
		return wire.CallFailure{}, false
	}
	return failure, true
}

// isProtocolMismatch says whether err is a server's 200 in another
// protocol than the call's.
func isProtocolMismatch(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == agentsagatype.ErrTypeProtocol
}

// errorText is the application error's message when there is one: the
// part that says what went wrong, without the activity wrapper around it.
func errorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	return err.Error()
}
