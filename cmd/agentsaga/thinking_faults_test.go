package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/workflows"
)

const nsKillBetweenThinkingAndResult = "fault-kill-thinking"

// The thinking block the provider sends with its tool call, and the
// signature Anthropic's API checks when the block comes back.
const (
	thinkingText      = "The customer asks where order A-1001 is; the order tool knows."
	thinkingSignature = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYTE3ZmY2YzIwZjc0YzYiMNs0fLhK2ePa6lq9Ky2D+6vVt0Hk4u9kY1Y7Vw=="
)

// thinkingProvider speaks Anthropic's Messages API with extended thinking,
// written here as the API documents it (not by the repository's fake
// providers), and enforces its rule: the assistant turn that holds
// tool_use comes back starting with its thinking block, signature intact,
// or the request is a 400 with the API's message.
type thinkingProvider struct {
	*httptest.Server
	requests atomic.Int32
	mu       sync.Mutex
	refused  []string // the 400s it answered, with why
}

func startThinkingProvider(t *testing.T) *thinkingProvider {
	t.Helper()
	p := &thinkingProvider{}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *thinkingProvider) serve(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Thinking *struct {
			Type         string `json:"type"`
			BudgetTokens int    `json:"budget_tokens"`
		} `json:"thinking"`
		Messages []struct {
			Role    string `json:"role"`
			Content []struct {
				Type      string `json:"type"`
				Thinking  string `json:"thinking"`
				Signature string `json:"signature"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Thinking == nil || req.Thinking.Type != "enabled" {
		p.refuse(w, fmt.Sprintf("thinking: extended thinking was not turned on in %s", body))
		return
	}
	answered := false
	for i, m := range req.Messages {
		if m.Role != "assistant" {
			continue
		}
		hasToolUse := false
		for _, block := range m.Content {
			hasToolUse = hasToolUse || block.Type == "tool_use"
		}
		if !hasToolUse {
			continue
		}
		answered = true
		first := m.Content[0]
		if first.Type != "thinking" && first.Type != "redacted_thinking" {
			p.refuse(w, fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns.", i, first.Type))
			return
		}
		if first.Signature != thinkingSignature || first.Thinking != thinkingText {
			p.refuse(w, fmt.Sprintf("messages.%d.content.0: Invalid `signature` in `thinking` block", i))
			return
		}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	events := []string{
		`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_think","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":120,"output_tokens":1}}}`,
	}
	if !answered {
		events = append(events,
			`event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
			`event: content_block_delta`+"\n"+fmt.Sprintf(`data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":%q}}`, thinkingText),
			`event: content_block_delta`+"\n"+fmt.Sprintf(`data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":%q}}`, thinkingSignature),
			`event: content_block_stop`+"\n"+`data: {"type":"content_block_stop","index":0}`,
			`event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_order","name":"order_status","input":{}}}`,
			`event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"order_id\": \"A-1001\"}"}}`,
			`event: content_block_stop`+"\n"+`data: {"type":"content_block_stop","index":1}`,
			`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":60}}`)
	} else {
		events = append(events,
			`event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Order A-1001 has shipped."}}`,
			`event: content_block_stop`+"\n"+`data: {"type":"content_block_stop","index":0}`,
			`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":8}}`)
	}
	events = append(events, `event: message_stop`+"\n"+`data: {"type":"message_stop"}`)
	_, _ = io.WriteString(w, strings.Join(events, "\n\n")+"\n\n")
}

func (p *thinkingProvider) refuse(w http.ResponseWriter, why string) {
	p.mu.Lock()
	p.refused = append(p.refused, why)
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	msg, _ := json.Marshal(why)
	fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%s}}`, msg)
}

// h. A worker process is SIGKILLed between a thinking turn and its tool's
// result (issue 42): the turn's thinking block lives in the ledger's
// conversation, so the next turn, on worker-2, sends it back intact and
// the provider accepts it.
func testWorkerKilledBetweenThinkingAndResult(t *testing.T, bin string, temporal *temporalServer) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const id = "fault-kill-thinking-run"
	c := temporal.client(t, nsKillBetweenThinkingAndResult)
	databaseURL := agentsagatest.NewDatabase(t)
	provider := startThinkingProvider(t)
	held, over := make(chan struct{}), make(chan struct{})
	var toolCalls atomic.Int32
	tool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if toolCalls.Add(1) == 1 {
			close(held)
			select {
			case <-r.Context().Done(): // the worker that asked is gone
			case <-over: // its socket outlived it
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"order_id":"A-1001","status":"shipped"}`)
	}))
	defer tool.Close()
	defer close(over)

	first := startWorkerProcess(t, bin, "worker-1", temporal.address(), nsKillBetweenThinkingAndResult, databaseURL)
	waitPolling(ctx, t, c, first)
	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: where is order A-1001?
budget: {steps: 4}
model: {provider: anthropic, name: claude-sonnet-4-5, base_url: %s, max_tokens: 4096, thinking: {budget_tokens: 2048}}
tools:
  - name: order_status
    kind: http
    url: %s/order
    read_only: true
    timeout_seconds: 45
    parameters: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
`, provider.URL, tool.URL)))
	require.NoError(t, err)
	run := startFaultRun(ctx, t, c, id, spec)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatalf("the tool was never called:\n%s", first.log())
	}
	first.kill()
	require.True(t, killedBySIGKILL(first), "worker-1 died of SIGKILL: %v", first.err)

	second := startWorkerProcess(t, bin, "worker-2", temporal.address(), nsKillBetweenThinkingAndResult, databaseURL)
	var result workflows.RunResult
	runErr := run.Get(ctx, &result)
	provider.mu.Lock()
	refused := provider.refused
	provider.mu.Unlock()
	// The invariant: every request after the thinking turn carried its
	// block intact. Each refusal is a violation.
	t.Logf("thinking kept across a kill: violations=%d", len(refused))
	assert.Empty(t, refused, "the provider refused a request for its thinking block")
	require.NoError(t, runErr, "the run finishes on worker-2:\n%s", second.log())
	require.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "Order A-1001 has shipped.", result.Answer)
	assert.EqualValues(t, 2, provider.requests.Load(), "one request a turn")
	assert.EqualValues(t, 2, toolCalls.Load(), "the tool's lost attempt, then worker-2's")
}
