package dataset

import (
	"encoding/json"
	"fmt"

	"github.com/agentsaga/agentsaga/internal/jsonpath"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// Redacted is what a redacted value becomes.
const Redacted = "[redacted]"

// ParsePaths parses redaction paths ($.customer.email), all or none.
func ParsePaths(paths []string) ([][]string, error) {
	var out [][]string
	for _, p := range paths {
		steps, err := jsonpath.Parse(p)
		if err != nil {
			return nil, fmt.Errorf("dataset: --redact: %w", err)
		}
		out = append(out, steps)
	}
	return out, nil
}

// Redact replaces what paths reach in e's goal, answer, call arguments and
// outputs, where each is JSON, and in the tool-call arguments of a
// scripted model's turns in its spec (its sub-agents' too), which are the
// same arguments, and in those turns' texts, the answers; and in the
// sub-agents' recordings alike. The goal is also the spec's. A text that
// is not JSON is left as it is: a path names a field, and free text has
// none.
func Redact(e *Entry, raw []string) error {
	paths, err := ParsePaths(raw)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return nil
	}
	if err := redactEntry(e, paths); err != nil {
		return err
	}
	e.Redacted = append(e.Redacted, raw...)
	return nil
}

// redactEntry redacts e and the sub-agents its calls started.
func redactEntry(e *Entry, paths [][]string) error {
	e.Goal = redactText(e.Goal, paths)
	e.Answer = redactText(e.Answer, paths)
	for i := range e.Calls {
		c := &e.Calls[i]
		c.Arguments = json.RawMessage(redactText(string(c.Arguments), paths))
		c.Output = redactText(c.Output, paths)
		if c.Agent != nil {
			if err := redactEntry(c.Agent, paths); err != nil {
				return err
			}
		}
	}
	var spec map[string]any
	if err := json.Unmarshal(e.Spec, &spec); err != nil {
		return fmt.Errorf("dataset: redact the spec of %s: %w", e.Source, err)
	}
	if _, ok := spec["goal"]; ok {
		spec["goal"] = e.Goal
	}
	redactScript(spec["model"], paths)
	agents, _ := spec["agents"].(map[string]any)
	for _, a := range agents {
		if agent, ok := a.(map[string]any); ok {
			redactScript(agent["model"], paths)
		}
	}
	var err error
	if e.Spec, err = json.Marshal(spec); err != nil {
		return fmt.Errorf("dataset: redact the spec of %s: %w", e.Source, err)
	}
	return nil
}

// redactScript redacts a scripted model's turns: their texts and their
// tool calls' arguments.
func redactScript(m any, paths [][]string) {
	model, _ := m.(map[string]any)
	turns, _ := model["script"].([]any)
	for _, t := range turns {
		turn, _ := t.(map[string]any)
		if content, ok := turn["content"].(string); ok {
			turn["content"] = redactText(content, paths)
		}
		calls, _ := turn["tool_calls"].([]any)
		for _, c := range calls {
			if call, ok := c.(map[string]any); ok {
				for _, p := range paths {
					jsonpath.Replace(call["arguments"], p, Redacted)
				}
			}
		}
	}
}

// RedactJSON is text with paths (ParsePaths) redacted as Redact redacts
// a call's arguments: when text is a JSON object or array, re-encoded
// canonically; any other text unchanged. Webhooks redact an approval's
// arguments with it (internal/webhooks).
func RedactJSON(text string, paths [][]string) string { return redactText(text, paths) }

// redactText is text with paths redacted when it is a JSON object or
// array, re-encoded canonically; any other text unchanged.
func redactText(text string, paths [][]string) string {
	var doc any
	if json.Unmarshal([]byte(text), &doc) != nil {
		return text
	}
	switch doc.(type) {
	case map[string]any, []any:
	default:
		return text
	}
	n := 0
	for _, p := range paths {
		n += jsonpath.Replace(doc, p, Redacted)
	}
	if n == 0 {
		return text
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return text
	}
	return wire.CanonicalJSON(string(out))
}
