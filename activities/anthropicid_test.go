package activities

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A conversation that began on an OpenAI-compatible server may carry tool
// call IDs the Messages API refuses; the call and its result are renamed
// alike, so they still pair up, and valid IDs pass unchanged.
func TestAnthropicToolIDKeepsPairs(t *testing.T) {
	assert.Equal(t, "call_abc-123", anthropicToolID("call_abc-123"))
	assert.Equal(t, "toolu_01A09q90qw90lq917835lq9", anthropicToolID("toolu_01A09q90qw90lq917835lq9"))
	assert.Equal(t, "functions_lookup_0", anthropicToolID("functions.lookup:0"))
	assert.Equal(t, anthropicToolID("x.y"), anthropicToolID("x.y"), "the same ID maps the same way in a call and its result")
}
