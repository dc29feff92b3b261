// Package jsonpath follows a dot path through a decoded JSON document: the
// one walker behind a tool's refusal rules (budget) and its compensation
// templates (compensation), so that "errors.0.code" means the same in both.
package jsonpath

import "strconv"

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
