// Package payload bounds what a run schedules, returns or answers in a
// query, so that a payload over the limit fails with an error naming it
// before Temporal terminates the run for it.
package payload

import (
	"encoding/json"
	"fmt"

	"github.com/agentsaga/agentsaga/internal/wire"
	"go.temporal.io/sdk/temporal"
)

// Max bounds every payload the engine schedules, returns or answers
// in a query: 256 KiB, where Temporal starts to warn. Temporal terminates
// a run whose payload passes its hard limit (2 MiB by default), which no
// compensation follows; a payload checked here fails first, with an error
// that names it.
const Max = 256 << 10

// Check returns a non-retryable error naming what when v, encoded
// as Temporal's default converter encodes it, is over Max.
func Check(what string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("payload: %s does not encode: %v", what, err), wire.ErrTypePayloadTooLarge, nil)
	}
	if len(data) > Max {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("payload: %s is %d KiB, over the %d KiB a run may schedule, return or answer", what, (len(data)+1023)>>10, Max>>10),
			wire.ErrTypePayloadTooLarge, nil)
	}
	return nil
}
