package jsonpath

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	var doc any
	assert.NoError(t, json.Unmarshal([]byte(`{"a":{"b":[{"c":1},{"c":"two"}]},"":{"x":true}}`), &doc))
	for path, want := range map[string]any{"a.b.1.c": "two", "a.b.0.c": 1.0, ".x": true} {
		got, ok := Lookup(doc, splitDots(path))
		assert.True(t, ok, path)
		assert.Equal(t, want, got, path)
	}
	for _, path := range []string{"a.b.2.c", "a.b.-1", "a.b.x", "a.c", "a.b.0.c.d"} {
		_, ok := Lookup(doc, splitDots(path))
		assert.False(t, ok, path)
	}
	got, ok := Lookup(doc, nil)
	assert.True(t, ok, "the empty path is the document")
	assert.Equal(t, doc, got)
}

func splitDots(path string) []string {
	var out []string
	start := 0
	for i := range len(path) {
		if path[i] == '.' {
			out = append(out, path[start:i])
			start = i + 1
		}
	}
	return append(out, path[start:])
}
