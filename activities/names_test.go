package activities

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/agentsaga/agentsaga/internal/wire"
)

// TestActivityNamesAreTheMethods holds the workflows' activity names
// (agentsagatype.Activity*) to the methods the worker registers: a renamed
// method, or a new one without a name, fails here rather than in a run.
func TestActivityNamesAreTheMethods(t *testing.T) {
	t.Parallel()
	ctxType := reflect.TypeFor[context.Context]()
	var methods []string
	for _, impl := range []any{&Activities{}, &Reconciliation{}} {
		typ := reflect.TypeOf(impl)
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			// The SDK registers every exported method; the activities
			// are those whose first argument is a context.
			if m.Type.NumIn() > 1 && m.Type.In(1) == ctxType {
				methods = append(methods, m.Name)
			}
		}
	}
	slices.Sort(methods)
	names := slices.Sorted(slices.Values(wire.Activities))
	assert.Equal(t, methods, names)
}
