package activities

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/internal/wire"
)

// One table classifies a failure; toActivityError builds the activity
// error from it and the retry hook reads that error back the same way.
func TestClassifyIsOneTable(t *testing.T) {
	no := false
	cases := []struct {
		name       string
		err        error
		errType    string
		retryable  bool
		status     int
		retryAfter time.Duration
	}{
		{"plain", errors.New("boom"), wire.ErrTypeTransient, true, 0, 0},
		{"permanent", Permanent(errors.New("bad input")), wire.ErrTypeRejected, false, 0, 0},
		{"503", &HTTPError{Op: "tool t", StatusCode: 503, RetryAfter: 2 * time.Second}, wire.ErrTypeHTTP, true, 503, 2 * time.Second},
		{"429", &HTTPError{Op: "tool t", StatusCode: 429}, wire.ErrTypeHTTP, true, 429, 0},
		{"409", &HTTPError{Op: "tool t", StatusCode: 409}, wire.ErrTypeHTTP, true, 409, 0},
		{"409 should not retry", &HTTPError{Op: "tool t", StatusCode: 409, ShouldRetry: &no}, wire.ErrTypeHTTP, false, 409, 0},
		{"400", &HTTPError{Op: "tool t", StatusCode: 400, RetryAfter: time.Second}, wire.ErrTypeHTTP, false, 400, 0},
		{"401", &HTTPError{Op: "tool t", StatusCode: 401}, wire.ErrTypePermission, false, 401, 0},
		{"403", &HTTPError{Op: "tool t", StatusCode: 403}, wire.ErrTypePermission, false, 403, 0},
		{"404", &HTTPError{Op: "tool t", StatusCode: 404}, wire.ErrTypeNotFound, false, 404, 0},
		{"410", &HTTPError{Op: "tool t", StatusCode: 410}, wire.ErrTypeNotFound, false, 410, 0},
		{"wrapped", fmt.Errorf("calling: %w", &HTTPError{Op: "tool t", StatusCode: 404}), wire.ErrTypeNotFound, false, 404, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classify(c.err)
			assert.Equal(t, c.errType, got.errType)
			assert.Equal(t, c.retryable, got.retryable)
			assert.Equal(t, c.status, got.status)
			assert.Equal(t, c.retryAfter, got.retryAfter)
			assert.False(t, got.fromActivityError)

			// What the activity returns reads back as the same class.
			built := toActivityError(c.err)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, built, &appErr)
			assert.Equal(t, c.errType, appErr.Type())
			assert.Equal(t, !c.retryable, appErr.NonRetryable())
			back := classify(built)
			assert.True(t, back.fromActivityError)
			assert.Equal(t, c.errType, back.errType)
			assert.Equal(t, c.retryable, back.retryable)
			assert.Equal(t, c.status, back.status)
			assert.Equal(t, c.retryAfter, back.retryAfter)
		})
	}
}
