package activities_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
)

// TestConversationCarriesOverBetweenProviders guarantees issue 20 item 4:
// the conversation carries over between providers in both directions, tool
// calls and tool results, OpenAI to Anthropic and back. One run switches
// model between turns: OpenAI asks for a tool, Anthropic reads that call and
// its result and asks for another tool, and OpenAI reads both calls and
// both results and answers. Each fake server is the loopback one of
// openai_test.go or anthropic_test.go, so what is checked is the real wire
// format each SDK sent. Every tool call keeps its id across the switch, and
// every tool result names the call it answers, in order: an id that is
// dropped, rewritten or attached to the wrong result, or a result that is
// lost, changes a line of the expected wire and fails the test.
func TestConversationCarriesOverBetweenProviders(t *testing.T) {
	ctx := context.Background()
	tools := []agentsagatype.ToolDef{
		{Name: "lookup", Description: "An order's status.", Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"integer"}},"required":["order_id"]}`)},
		{Name: "owner", Description: "Who placed an order.", Parameters: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"integer"}},"required":["order_id"]}`)},
	}
	conversation := []agentsagatype.Message{
		{Role: "system", Content: "You are an order assistant."},
		{Role: "user", Content: "What is the status of order 42, and who placed it?"},
	}
	// reply is a turn as the conversation keeps it, as CallModel writes it.
	reply := func(turn agentsagatype.ModelTurn) agentsagatype.Message {
		return agentsagatype.Message{Role: "assistant", Content: turn.Content, ToolCalls: turn.ToolCalls}
	}

	// Turn 1, OpenAI: asks for lookup.
	openai1 := newChatServer(t, http.StatusOK, nil, crossOpenAIToolCall)
	turn, err := newModel(t, openai1.URL, testAPIKey).Turn(ctx, activities.ModelRequest{Messages: conversation, Tools: tools})
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.ModelTurn{
		ToolCalls: []agentsagatype.ToolCall{{ID: "call_abc123", Name: "lookup", Arguments: `{"order_id":42}`}},
		Usage:     agentsagatype.Usage{InputTokens: 31, OutputTokens: 18},
		Model:     "gpt-4o-mini-2024-07-18",
	}, turn)
	conversation = append(conversation,
		reply(turn),
		agentsagatype.Message{Role: "tool", ToolCallID: "call_abc123", Name: "lookup", Content: `{"status":"shipped"}`},
	)

	// Turn 2, Anthropic: reads OpenAI's call and its result, asks for owner.
	anthropic := newMessagesServer(t, http.StatusOK, nil, crossAnthropicToolUse)
	turn, err = newAnthropic(t, anthropic.URL, testAPIKey).Turn(ctx, activities.ModelRequest{Messages: conversation, Tools: tools})
	require.NoError(t, err)
	system, got := anthropicWire(t, *anthropic.lastBody.Load())
	assert.Equal(t, "You are an order assistant.", system, "the system prompt is the top-level system field")
	assert.Equal(t, []string{
		"0 user text: What is the status of order 42, and who placed it?",
		"1 assistant tool_use call_abc123 lookup {\"order_id\":42}",
		"2 user tool_result call_abc123: {\"status\":\"shipped\"}",
	}, got, "Anthropic received OpenAI's tool call and its result")
	assert.Equal(t, agentsagatype.ModelTurn{
		Content:   "Order 42 has shipped. Let me find who placed it.",
		ToolCalls: []agentsagatype.ToolCall{{ID: "toolu_01A09q90qw90lq917835lq9", Name: "owner", Arguments: `{"order_id":42}`}},
		Usage:     agentsagatype.Usage{InputTokens: 120, OutputTokens: 45},
		Model:     "claude-sonnet-4-5-20250929",
	}, turn)
	conversation = append(conversation,
		reply(turn),
		agentsagatype.Message{Role: "tool", ToolCallID: "toolu_01A09q90qw90lq917835lq9", Name: "owner", Content: `{"name":"Ada Lovelace"}`},
	)

	// Turn 3, OpenAI again: reads both calls and both results, answers.
	openai2 := newChatServer(t, http.StatusOK, nil, crossOpenAIFinalAnswer)
	turn, err = newModel(t, openai2.URL, testAPIKey).Turn(ctx, activities.ModelRequest{Messages: conversation, Tools: tools})
	require.NoError(t, err)
	assert.Equal(t, []string{
		"0 system: You are an order assistant.",
		"1 user: What is the status of order 42, and who placed it?",
		"2 assistant tool_call call_abc123 lookup {\"order_id\":42}",
		"3 tool call_abc123: {\"status\":\"shipped\"}",
		"4 assistant: Order 42 has shipped. Let me find who placed it.",
		"4 assistant tool_call toolu_01A09q90qw90lq917835lq9 owner {\"order_id\":42}",
		"5 tool toolu_01A09q90qw90lq917835lq9: {\"name\":\"Ada Lovelace\"}",
	}, openAIWire(t, *openai2.lastBody.Load()), "OpenAI received both providers' tool calls and their results")
	assert.Equal(t, agentsagatype.ModelTurn{
		Content: "Order 42 has shipped; Ada Lovelace placed it.",
		Usage:   agentsagatype.Usage{InputTokens: 210, OutputTokens: 25},
		Model:   "gpt-4o-mini-2024-07-18",
	}, turn)
}

// anthropicWire is a Messages request body as its system prompt and one
// line per content block: the message's index, its role, and the block.
func anthropicWire(t *testing.T, body []byte) (string, []string) {
	t.Helper()
	var req struct {
		System []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"system"`
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string          `json:"type"`
				Text      string          `json:"text"`
				ID        string          `json:"id"`
				Name      string          `json:"name"`
				Input     json.RawMessage `json:"input"`
				ToolUseID string          `json:"tool_use_id"`
				Content   []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
			} `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &req))
	var system string
	for _, block := range req.System {
		require.Equal(t, "text", block.Type)
		system += block.Text
	}
	var lines []string
	for i, msg := range req.Messages {
		for _, block := range msg.Content {
			line := fmt.Sprintf("%d %s %s", i, msg.Role, block.Type)
			switch block.Type {
			case "text":
				line += ": " + block.Text
			case "tool_use":
				line += fmt.Sprintf(" %s %s %s", block.ID, block.Name, compactJSON(t, string(block.Input)))
			case "tool_result":
				line += " " + block.ToolUseID + ":"
				for _, part := range block.Content {
					require.Equal(t, "text", part.Type, "messages[%d] tool_result %s", i, block.ToolUseID)
					line += " " + part.Text
				}
			}
			lines = append(lines, line)
		}
	}
	return system, lines
}

// openAIWire is a chat-completions request body as one line per message,
// and one more per tool call: the message's index, its role, and what it
// carries.
func openAIWire(t *testing.T, body []byte) []string {
	t.Helper()
	var req struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(body, &req))
	var lines []string
	for i, msg := range req.Messages {
		var content string
		if len(msg.Content) > 0 && string(msg.Content) != "null" {
			require.NoError(t, json.Unmarshal(msg.Content, &content), "messages[%d].content is a string", i)
		}
		switch {
		case msg.Role == "tool":
			lines = append(lines, fmt.Sprintf("%d tool %s: %s", i, msg.ToolCallID, content))
		case content != "" || len(msg.ToolCalls) == 0:
			lines = append(lines, fmt.Sprintf("%d %s: %s", i, msg.Role, content))
		}
		for _, call := range msg.ToolCalls {
			require.Equal(t, "function", call.Type, "messages[%d] tool call %s", i, call.ID)
			lines = append(lines, fmt.Sprintf("%d %s tool_call %s %s %s", i, msg.Role, call.ID, call.Function.Name, compactJSON(t, call.Function.Arguments)))
		}
	}
	return lines
}

// compactJSON is s without insignificant spaces, so that arguments compare
// by value whichever SDK wrote them.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, []byte(s)), "not JSON: %s", s)
	return b.String()
}

// crossOpenAIToolCall is OpenAI asking for lookup.
const crossOpenAIToolCall = `{
  "id": "chatcmpl-cross-1",
  "object": "chat.completion",
  "created": 1700000000,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [{
    "index": 0,
    "message": {
      "role": "assistant",
      "content": null,
      "refusal": null,
      "tool_calls": [
        {"id": "call_abc123", "type": "function", "function": {"name": "lookup", "arguments": "{\"order_id\":42}"}}
      ]
    },
    "logprobs": null,
    "finish_reason": "tool_calls"
  }],
  "usage": {"prompt_tokens": 31, "completion_tokens": 18, "total_tokens": 49}
}`

// crossAnthropicToolUse is Anthropic saying something and asking for owner.
const crossAnthropicToolUse = `{
  "id": "msg_01Cross",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "text", "text": "Order 42 has shipped. Let me find who placed it."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "owner", "input": {"order_id":42}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {"input_tokens": 120, "output_tokens": 45}
}`

// crossOpenAIFinalAnswer is OpenAI answering.
const crossOpenAIFinalAnswer = `{
  "id": "chatcmpl-cross-2",
  "object": "chat.completion",
  "created": 1700000001,
  "model": "gpt-4o-mini-2024-07-18",
  "choices": [{
    "index": 0,
    "message": {"role": "assistant", "content": "Order 42 has shipped; Ada Lovelace placed it.", "refusal": null},
    "logprobs": null,
    "finish_reason": "stop"
  }],
  "usage": {"prompt_tokens": 210, "completion_tokens": 25, "total_tokens": 235}
}`
