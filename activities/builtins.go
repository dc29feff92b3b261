package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Builtins returns a toolbox of the Go tools every worker offers, with
// extra's tools added (one of the same name replaces the built-in), so that
// a worker's own tools join them; extra may be nil. A spec uses one by
// declaring a tool of kind "go" with its name.
//
//   - word_count {"text": string} counts the words in text.
func Builtins(extra *Toolbox) *Toolbox {
	box := NewToolbox()
	box.Register("word_count", wordCount)
	box.merge(extra)
	return box
}

func wordCount(_ context.Context, call ToolInvocation) (string, error) {
	var args struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || args.Text == nil {
		return "", Permanent(fmt.Errorf("word_count: arguments must be {\"text\": string}"))
	}
	return fmt.Sprintf(`{"words": %d}`, len(strings.Fields(*args.Text))), nil
}
