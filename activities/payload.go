package activities

import (
	"encoding/json"
	"fmt"

	"go.temporal.io/sdk/temporal"
)

// MaxPayload bounds every payload the engine schedules, returns or answers
// in a query: 256 KiB, where Temporal starts to warn. Temporal terminates
// a run whose payload passes its hard limit (2 MiB by default), which no
// compensation follows; a payload checked here fails first, with an error
// that names it.
const MaxPayload = 256 << 10

// ErrTypePayloadTooLarge is the error type of a payload over MaxPayload.
const ErrTypePayloadTooLarge = "PayloadTooLarge"

// CheckPayload returns a non-retryable error naming what when v, encoded
// as Temporal's default converter encodes it, is over MaxPayload.
func CheckPayload(what string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("payload: %s does not encode: %v", what, err), ErrTypePayloadTooLarge, nil)
	}
	if len(data) > MaxPayload {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payload: %s is %d KiB, over the %d KiB a run may schedule, return or answer", what, (len(data)+1023)>>10, MaxPayload>>10),
			ErrTypePayloadTooLarge, nil)
	}
	return nil
}
