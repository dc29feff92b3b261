package worker_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// The corpus's loopback model servers for the providers that keep their
// reasoning (issue 42): each speaks its provider's streaming wire format,
// written out by hand as the provider documents it (not by the SDKs'
// types), answers turn 1 with reasoning and a tool call, and refuses turn
// 2, as the provider does, with a 400 and the provider's message, unless
// it carries that reasoning back intact. A refusal also fails the
// recording: the history of a run whose reasoning was lost is not one to
// keep. Each scenario starts its own server, so a server's state is its
// run's.

// Anthropic's extended thinking: the thinking block and the signature the
// API checks when the block comes back.
const (
	corpusThinking          = "Ann is owed a charge of 10; the charge tool makes it, once."
	corpusThinkingSignature = "EqQBCgIYAhIMcorpusSignatureGgxDYTE3ZmY2YzIwZjc0YzYiMNs0fLhK2ePa6lq9Ky2D+6vVt0Hk4u9kY1Y7Vw=="
)

// thinkingModel is an Anthropic Messages API (POST /v1/messages) with
// extended thinking: the assistant turn that holds tool_use must come back
// starting with its thinking block, text and signature intact.
func thinkingModel(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		type block struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}
		var req struct {
			Stream   bool `json:"stream"`
			Thinking *struct {
				Type         string `json:"type"`
				BudgetTokens int    `json:"budget_tokens"`
			} `json:"thinking"`
			Messages []struct {
				Role    string  `json:"role"`
				Content []block `json:"content"`
			} `json:"messages"`
		}
		refuse := func(why string) {
			t.Errorf("thinking-tool-use: the model refused a request: %s", why)
			msg, _ := json.Marshal(why)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%s}}`, msg)
		}
		if err := json.Unmarshal(body, &req); err != nil || req.Thinking == nil || req.Thinking.Type != "enabled" || req.Thinking.BudgetTokens != 2048 || !req.Stream {
			refuse(fmt.Sprintf("thinking: extended thinking (budget 2048) on a stream was not asked for in %s", body))
			return
		}
		answered := false
		for i, m := range req.Messages {
			if m.Role != "assistant" || !slices.ContainsFunc(m.Content, func(b block) bool { return b.Type == "tool_use" }) {
				continue
			}
			answered = true
			first := m.Content[0]
			if first.Type != "thinking" && first.Type != "redacted_thinking" {
				refuse(fmt.Sprintf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns.", i, first.Type))
				return
			}
			if first.Signature != corpusThinkingSignature || first.Thinking != corpusThinking {
				refuse(fmt.Sprintf("messages.%d.content.0: Invalid `signature` in `thinking` block", i))
				return
			}
		}
		events := []string{
			`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_corpus","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":120,"output_tokens":1}}}`,
		}
		if !answered {
			events = append(events,
				`event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
				`event: content_block_delta`+"\n"+fmt.Sprintf(`data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":%q}}`, corpusThinking),
				`event: content_block_delta`+"\n"+fmt.Sprintf(`data: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":%q}}`, corpusThinkingSignature),
				`event: content_block_stop`+"\n"+`data: {"type":"content_block_stop","index":0}`,
				`event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_corpus_1","name":"charge","input":{}}}`,
				`event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"customer\": \"ann\", "}}`,
				`event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"amount\": 10}"}}`,
				`event: content_block_stop`+"\n"+`data: {"type":"content_block_stop","index":1}`,
				`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":60}}`)
		} else {
			events = append(events,
				`event: content_block_start`+"\n"+`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
				`event: content_block_delta`+"\n"+`data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Ann is charged 10."}}`,
				`event: content_block_stop`+"\n"+`data: {"type":"content_block_stop","index":0}`,
				`event: message_delta`+"\n"+`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":8}}`)
		}
		events = append(events, `event: message_stop`+"\n"+`data: {"type":"message_stop"}`)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, strings.Join(events, "\n\n")+"\n\n")
	}))
}

// OpenAI's Responses API with store false: the reasoning item and the
// encrypted_content the client must send back unchanged.
const (
	corpusReasoningID  = "rs_corpus_1"
	corpusReasoningEnc = "gAAAAABo-corpus+/kx2Q==.enc-reasoning-corpus-1"
	corpusReasoning    = `{"id":"` + corpusReasoningID + `","type":"reasoning","summary":[{"type":"summary_text","text":"A supplier search comes first."}],"encrypted_content":"` + corpusReasoningEnc + `"}`
	corpusCallID       = "call_corpus_1"
)

// reasoningModel is OpenAI's Responses API (POST /v1/responses) as a
// reasoning model answers with store false: a function call's output may
// come back only after the reasoning item the call was emitted with, its
// encrypted_content unchanged.
func reasoningModel(t *testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var body struct {
			Stream    bool              `json:"stream"`
			Store     *bool             `json:"store"`
			Include   []string          `json:"include"`
			Reasoning map[string]any    `json:"reasoning"`
			Input     []json.RawMessage `json:"input"`
		}
		refuse := func(message, param string) {
			t.Errorf("reasoning-items: the model refused a request: %s", message)
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": message, "type": "invalid_request_error", "param": param, "code": nil}})
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(b)
		}
		if err := json.Unmarshal(raw, &body); err != nil || !body.Stream || body.Store == nil || *body.Store ||
			!slices.Contains(body.Include, "reasoning.encrypted_content") || body.Reasoning["effort"] != "high" {
			refuse(fmt.Sprintf("the corpus's model wants a stream, store false, the reasoning's encrypted content and effort high: %s", raw), "")
			return
		}
		items := make([]map[string]any, len(body.Input))
		for i, it := range body.Input {
			_ = json.Unmarshal(it, &items[i])
		}
		answered := false
		for i, item := range items {
			if item["type"] != "function_call_output" || item["call_id"] != corpusCallID {
				continue
			}
			answered = true
			call := slices.IndexFunc(items, func(it map[string]any) bool {
				return it["type"] == "function_call" && it["call_id"] == corpusCallID
			})
			if call < 0 || call > i {
				refuse("No tool call found for function call output with call_id "+corpusCallID+".", "input")
				return
			}
			if !slices.ContainsFunc(items[:call], func(it map[string]any) bool {
				return it["type"] == "reasoning" && it["id"] == corpusReasoningID && it["encrypted_content"] == corpusReasoningEnc
			}) {
				refuse("Item 'fc_corpus_1' of type 'function_call' was provided without its required 'reasoning' item: '"+corpusReasoningID+"'.", "input")
				return
			}
		}
		response := func(status, output, usage string) string {
			return `{"id":"resp_corpus","object":"response","created_at":1741476777,"status":"` + status + `","error":null,"incomplete_details":null,` +
				`"instructions":null,"max_output_tokens":2048,"model":"o4-mini-2025-04-16","output":[` + output + `],"parallel_tool_calls":true,` +
				`"previous_response_id":null,"reasoning":{"effort":"high","summary":null},"store":false,"temperature":1.0,` +
				`"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":` + usage + `,"user":null,"metadata":{}}`
		}
		usage := func(input, output, reasoning int) string {
			return fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":0},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}`,
				input, output, reasoning, input+output)
		}
		events := [][2]string{
			{"response.created", `{"type":"response.created","sequence_number":SEQ,"response":` + response("in_progress", "", "null") + `}`},
			{"response.in_progress", `{"type":"response.in_progress","sequence_number":SEQ,"response":` + response("in_progress", "", "null") + `}`},
		}
		if !answered {
			args := `{\"query\":\"supplier of oak\"}`
			call := `{"id":"fc_corpus_1","type":"function_call","status":"completed","arguments":"` + args + `","call_id":"` + corpusCallID + `","name":"search"}`
			events = append(events, [][2]string{
				{"response.output_item.added", `{"type":"response.output_item.added","sequence_number":SEQ,"output_index":0,"item":{"id":"` + corpusReasoningID + `","type":"reasoning","summary":[]}}`},
				{"response.reasoning_summary_part.added", `{"type":"response.reasoning_summary_part.added","sequence_number":SEQ,"item_id":"` + corpusReasoningID + `","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}}`},
				{"response.reasoning_summary_text.delta", `{"type":"response.reasoning_summary_text.delta","sequence_number":SEQ,"item_id":"` + corpusReasoningID + `","output_index":0,"summary_index":0,"delta":"A supplier search comes first."}`},
				{"response.reasoning_summary_text.done", `{"type":"response.reasoning_summary_text.done","sequence_number":SEQ,"item_id":"` + corpusReasoningID + `","output_index":0,"summary_index":0,"text":"A supplier search comes first."}`},
				{"response.reasoning_summary_part.done", `{"type":"response.reasoning_summary_part.done","sequence_number":SEQ,"item_id":"` + corpusReasoningID + `","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":"A supplier search comes first."}}`},
				{"response.output_item.done", `{"type":"response.output_item.done","sequence_number":SEQ,"output_index":0,"item":` + corpusReasoning + `}`},
				{"response.output_item.added", `{"type":"response.output_item.added","sequence_number":SEQ,"output_index":1,"item":{"id":"fc_corpus_1","type":"function_call","status":"in_progress","arguments":"","call_id":"` + corpusCallID + `","name":"search"}}`},
				{"response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":SEQ,"item_id":"fc_corpus_1","output_index":1,"delta":"{\"query\":"}`},
				{"response.function_call_arguments.delta", `{"type":"response.function_call_arguments.delta","sequence_number":SEQ,"item_id":"fc_corpus_1","output_index":1,"delta":"\"supplier of oak\"}"}`},
				{"response.function_call_arguments.done", `{"type":"response.function_call_arguments.done","sequence_number":SEQ,"item_id":"fc_corpus_1","output_index":1,"arguments":"` + args + `"}`},
				{"response.output_item.done", `{"type":"response.output_item.done","sequence_number":SEQ,"output_index":1,"item":` + call + `}`},
				{"response.completed", `{"type":"response.completed","sequence_number":SEQ,"response":` + response("completed", corpusReasoning+","+call, usage(900, 180, 128)) + `}`},
			}...)
		} else {
			const text = "No supplier of oak was found."
			message := `{"id":"msg_corpus_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"` + text + `","annotations":[]}]}`
			events = append(events, [][2]string{
				{"response.output_item.added", `{"type":"response.output_item.added","sequence_number":SEQ,"output_index":0,"item":{"id":"msg_corpus_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`},
				{"response.content_part.added", `{"type":"response.content_part.added","sequence_number":SEQ,"item_id":"msg_corpus_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`},
				{"response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":SEQ,"item_id":"msg_corpus_1","output_index":0,"content_index":0,"delta":"` + text + `","logprobs":[]}`},
				{"response.output_text.done", `{"type":"response.output_text.done","sequence_number":SEQ,"item_id":"msg_corpus_1","output_index":0,"content_index":0,"text":"` + text + `","logprobs":[]}`},
				{"response.content_part.done", `{"type":"response.content_part.done","sequence_number":SEQ,"item_id":"msg_corpus_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":"` + text + `","annotations":[]}}`},
				{"response.output_item.done", `{"type":"response.output_item.done","sequence_number":SEQ,"output_index":0,"item":` + message + `}`},
				{"response.completed", `{"type":"response.completed","sequence_number":SEQ,"response":` + response("completed", message, usage(1000, 20, 0)) + `}`},
			}...)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i, e := range events {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e[0], strings.Replace(e[1], "SEQ", fmt.Sprint(i), 1))
		}
	}))
}

// corpusThoughtSignature is the thought signature the Gemini server issues
// with its function call: valid base64 of bytes that are not text, so that
// any re-encoding on the way back shows.
var corpusThoughtSignature = base64.StdEncoding.EncodeToString([]byte{0x0a, 0xff, 0x00, 0x80, 0x7f, 0xfe, 0x43, 0x4f, 0xc3, 0x28, 0x01, 0x02})

// corpusGeminiKey is the Gemini API key the server checks, which the
// worker reads from corpusGeminiKeyEnv (the spec's api_key_env): the
// Gemini provider needs one.
const (
	corpusGeminiKey    = "AIzaSy-corpus-gemini-key"
	corpusGeminiKeyEnv = "AGENTSAGA_CORPUS_GEMINI_KEY"
)

// signatureModel is Gemini's native API (POST
// /v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse): like
// Gemini 3, it refuses a functionResponse after a model functionCall that
// lacks the thoughtSignature issued with it, or carries other bytes.
func signatureModel(t *testing.T) *httptest.Server {
	t.Setenv(corpusGeminiKeyEnv, corpusGeminiKey)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1beta/models/gemini-2.5-flash:streamGenerateContent" || r.URL.Query().Get("alt") != "sse" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.String(), http.StatusNotFound)
			return
		}
		refuse := func(status int, code, message string) {
			t.Errorf("thought-signatures: the model refused a request: %s", message)
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": message, "status": code}})
			w.Header().Set("Content-Type", "application/json; charset=UTF-8")
			w.WriteHeader(status)
			_, _ = w.Write(b)
		}
		if r.Header.Get("x-goog-api-key") != corpusGeminiKey {
			refuse(http.StatusBadRequest, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var body struct {
			Contents []struct {
				Role  string           `json:"role"`
				Parts []map[string]any `json:"parts"`
			} `json:"contents"`
		}
		if err := json.Unmarshal(raw, &body); err != nil {
			refuse(http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received: "+err.Error())
			return
		}
		answered := false
		for i, content := range body.Contents {
			if content.Role != "model" || i+1 >= len(body.Contents) ||
				!slices.ContainsFunc(body.Contents[i+1].Parts, func(p map[string]any) bool { return p["functionResponse"] != nil }) {
				continue
			}
			for _, part := range content.Parts {
				call, ok := part["functionCall"].(map[string]any)
				if !ok || call["name"] != "stock" {
					continue
				}
				answered = true
				if part["thoughtSignature"] != corpusThoughtSignature {
					refuse(http.StatusBadRequest, "INVALID_ARGUMENT", "Function call is missing a thought_signature in functionCall parts. "+
						"This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. "+
						"Additional data, function call `default_api:stock` , position 2. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.")
					return
				}
			}
		}
		var chunks []string
		if !answered {
			chunks = []string{
				`{"candidates": [{"content": {"parts": [{"text": "Restocking item 7."}], "role": "model"}, "index": 0}], "usageMetadata": {"promptTokenCount": 300, "totalTokenCount": 300}, "modelVersion": "gemini-2.5-flash", "responseId": "rsp-corpus-1"}`,
				`{"candidates": [{"content": {"parts": [{"functionCall": {"name": "stock", "args": {"item": 7}}, "thoughtSignature": "` + corpusThoughtSignature + `"}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 20, "thoughtsTokenCount": 120, "totalTokenCount": 440}, "modelVersion": "gemini-2.5-flash", "responseId": "rsp-corpus-1"}`,
			}
		} else {
			chunks = []string{
				`{"candidates": [{"content": {"parts": [{"text": "Item 7 is restocked."}], "role": "model"}, "finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 380, "candidatesTokenCount": 6, "totalTokenCount": 386}, "modelVersion": "gemini-2.5-flash", "responseId": "rsp-corpus-2"}`,
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, chunk := range chunks {
			_, _ = io.WriteString(w, "data: "+chunk+"\r\n\r\n")
		}
	}))
}

// htmlModel answers every request 200 with an HTML page, as a corporate
// proxy's sign-in page does: another protocol than the model's.
func htmlModel(*testing.T) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<html><body>Please sign in to the corporate proxy</body></html>")
	}))
}
