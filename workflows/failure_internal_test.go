package workflows

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/internal/wire"
)

func TestClassifyReadsTheOneTable(t *testing.T) {
	appErr := func(errType string) error {
		return temporal.NewNonRetryableApplicationError("it went wrong", errType, nil)
	}
	for name, tc := range map[string]struct {
		err            error
		mayHaveClaimed bool
		asksHuman      string
		nothingToUndo  bool
	}{
		"invalid arguments": {err: appErr(wire.ErrTypeInvalidArguments)},
		"unknown tool":      {err: appErr(wire.ErrTypeUnknownTool)},
		"conflict":          {err: appErr(wire.ErrTypeConflict)},
		"refusal":           {err: appErr(wire.ErrTypeRefusal), mayHaveClaimed: true, asksHuman: "Tool %s refused: %s"},
		"permission":        {err: appErr(wire.ErrTypePermission), mayHaveClaimed: true, asksHuman: "Tool %s was denied permission: %s"},
		"not found":         {err: appErr(wire.ErrTypeNotFound), mayHaveClaimed: true, nothingToUndo: true},
		"another type":      {err: appErr("Timeout"), mayHaveClaimed: true},
		"not an app error":  {err: errors.New("it went wrong"), mayHaveClaimed: true},
		"cancelled":         {err: temporal.NewCanceledError()},
	} {
		t.Run(name, func(t *testing.T) {
			failed := classify(tc.err)
			assert.Equal(t, tc.mayHaveClaimed, failed.mayHaveClaimed())
			assert.Equal(t, tc.asksHuman, failed.asksHuman)
			assert.Equal(t, tc.nothingToUndo, failed.nothingToUndo)
			assert.Equal(t, errorText(tc.err), failed.message)
		})
	}
	assert.Equal(t, failure{}, classify(nil))
}
