package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentsaga/agentsaga/activities"
)

// Builtins returns the Go tools every worker offers. A spec uses one by
// declaring a tool of kind "go" with its name.
//
//   - word_count {"text": string} counts the words in text.
func Builtins() *activities.Toolbox {
	box := activities.NewToolbox()
	box.Register("word_count", wordCount)
	return box
}

func wordCount(_ context.Context, call activities.ToolInvocation) (string, error) {
	var args struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil || args.Text == nil {
		return "", activities.Permanent(fmt.Errorf("word_count: arguments must be {\"text\": string}"))
	}
	return fmt.Sprintf(`{"words": %d}`, len(strings.Fields(*args.Text))), nil
}
