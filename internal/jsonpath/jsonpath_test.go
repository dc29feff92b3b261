package jsonpath

import (
	"encoding/json"
	"strings"
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

// A redaction path parses to the steps Replace follows; one that does not
// parse is an error, never a path that silently matches nothing.
func TestParseAndReplace(t *testing.T) {
	steps, err := Parse("$.customers[*].email")
	if err != nil || strings.Join(steps, "|") != "customers|*|email" {
		t.Fatalf("Parse: %q, %v", steps, err)
	}
	var doc any
	_ = json.Unmarshal([]byte(`{"customers":[{"email":"a@x"},{"email":"b@x","id":1}]}`), &doc)
	if n := Replace(doc, steps, "[redacted]"); n != 2 {
		t.Fatalf("Replace replaced %d, want 2", n)
	}
	out, _ := json.Marshal(doc)
	if strings.Contains(string(out), "@x") {
		t.Fatalf("left a value: %s", out)
	}
	for _, bad := range []string{"customer.email", "$", "$.a[", "$.a[x]", "$..a", "$.a[?(@.b)]"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) parsed", bad)
		}
	}
}
