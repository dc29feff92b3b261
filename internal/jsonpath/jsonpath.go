// Package jsonpath follows a dot path through a decoded JSON document: the
// one walker behind a tool's refusal rules (budget) and its compensation
// templates (compensation), so that "errors.0.code" means the same in both;
// and the JSONPaths ($.customer.email) a dataset's redaction replaces.
package jsonpath

import (
	"fmt"
	"strconv"
	"strings"
)

// Lookup follows path through objects by key and through arrays by index,
// and reports whether every step was there.
func Lookup(doc any, path []string) (any, bool) {
	for _, step := range path {
		switch node := doc.(type) {
		case map[string]any:
			next, ok := node[step]
			if !ok {
				return nil, false
			}
			doc = next
		case []any:
			i, err := strconv.Atoi(step)
			if err != nil || i < 0 || i >= len(node) {
				return nil, false
			}
			doc = node[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// Parse reads a JSONPath of the dot form the dataset redaction takes,
// $.customer.email or $.items[*].email or $.items[0].note, into the steps
// Lookup and Replace follow; "*" is every key or index of a step. Filters,
// slices, quoted keys and recursive descent are refused: a path that does
// not parse must be an error, never a redaction that silently redacts
// nothing.
func Parse(path string) ([]string, error) {
	rest, ok := strings.CutPrefix(path, "$")
	if !ok {
		return nil, fmt.Errorf("JSON path %q: it must start at the root, $", path)
	}
	var steps []string
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "["):
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return nil, fmt.Errorf("JSON path %q: a [ is not closed", path)
			}
			index := rest[1:end]
			if _, err := strconv.Atoi(index); err != nil && index != "*" {
				return nil, fmt.Errorf("JSON path %q: [%s] is not an index or [*]", path, index)
			}
			steps, rest = append(steps, index), rest[end+1:]
		case strings.HasPrefix(rest, "."):
			rest = rest[1:]
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			key := rest[:end]
			if key == "" || strings.ContainsAny(key, "]'\"()?@ ") {
				return nil, fmt.Errorf("JSON path %q: %q is not a key (write $.a.b, $.a[0], $.a[*])", path, key)
			}
			steps, rest = append(steps, key), rest[end:]
		default:
			return nil, fmt.Errorf("JSON path %q: expected . or [ at %q", path, rest)
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("JSON path %q: it names the whole document; name a field", path)
	}
	return steps, nil
}

// Replace sets every value path reaches in doc (decoded JSON, changed in
// place) to with, and counts them.
func Replace(doc any, path []string, with any) int {
	if len(path) == 0 {
		return 0
	}
	step, rest := path[0], path[1:]
	n := 0
	visit := func(get func() any, set func(any)) {
		if len(rest) == 0 {
			set(with)
			n++
			return
		}
		n += Replace(get(), rest, with)
	}
	switch node := doc.(type) {
	case map[string]any:
		for k := range node {
			if step == "*" || step == k {
				visit(func() any { return node[k] }, func(v any) { node[k] = v })
			}
		}
	case []any:
		for i := range node {
			if step == "*" || step == strconv.Itoa(i) {
				visit(func() any { return node[i] }, func(v any) { node[i] = v })
			}
		}
	}
	return n
}
