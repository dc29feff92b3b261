package activities

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/internal/wire"
)

// TestActivityNamesAreTheMethods holds the workflows' activity names
// (wire.Activities) to the methods Register gives a worker: a method left
// out, or a name without a method, fails here rather than in a run.
func TestActivityNamesAreTheMethods(t *testing.T) {
	t.Parallel()
	registered := slices.Concat(slices.Collect(maps.Keys((&Activities{}).named())), slices.Collect(maps.Keys((&Reconciliation{}).named())))
	slices.Sort(registered)
	assert.Equal(t, slices.Sorted(slices.Values(wire.Activities)), registered)
}
