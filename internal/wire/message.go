package wire

import (
	"encoding/json"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// Conversation says which of a run's messages a model call sends: those
// before Through, once Append (messages the workflow itself produced: the
// system prompt, the goal, a human's instruction, a failed call's error) is
// written. The model's reply becomes message Through.
type Conversation struct {
	WorkflowID string                  `json:"workflow_id"`
	Append     []agentsagatype.Message `json:"append,omitempty"`
	Through    int                     `json:"through"`
}

// MessageRef is where a tool call's output goes in the run's conversation.
type MessageRef struct {
	Seq        int    `json:"seq"`
	ToolCallID string `json:"tool_call_id,omitempty"`
	Name       string `json:"name,omitempty"`
}

// ReadResultTool is the built-in tool that reads a shortened output back
// whole, by the key its preview names.
const ReadResultTool = "read_result"

// ReadResultDef is how read_result is offered to the model.
var ReadResultDef = agentsagatype.ToolDef{
	Name:        ReadResultTool,
	Description: "Read back, whole, a tool output that was shortened to a preview. Pass the key its preview names.",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"],"additionalProperties":false}`),
}
