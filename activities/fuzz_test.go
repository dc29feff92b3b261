package activities_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/providerwire"
)

// fuzzAPIKey must never appear in an error, whatever the server sends back.
const fuzzAPIKey = "sk-fuzz-secret-7f3a"

// cannedTransport answers every request with one response, without a
// network: the fuzzed bytes go through the SDK's decoding (of the stream,
// or of an error) and agentsaga's mapping exactly as a server's answer
// would, thousands of times a second.
type cannedTransport struct {
	status int
	header http.Header
	body   []byte
}

func (c cannedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		Status:        strconv.Itoa(c.status) + " " + http.StatusText(c.status),
		StatusCode:    c.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        c.header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(c.body)),
		ContentLength: int64(len(c.body)),
		Request:       req,
	}, nil
}

// fuzzResponse builds the canned answer. Statuses outside 200-599 are
// folded into it: 1xx never reaches a client and a 3xx is the HTTP
// client's business, not the parser's. A 2xx body that is a whole reply
// (what stream reads: a chat.completion, an Anthropic message) is sent as
// the stream the provider would send; any other body is sent as it is, as
// the stream, so the fuzzer mutates the events too.
func fuzzResponse(status int, retryAfter, shouldRetry string, jsonType bool, body []byte,
	stream func(reply []byte, piece int) ([]providerwire.Event, error)) cannedTransport {
	if status < 200 || status > 599 {
		status = 200 + int(uint(status)%400)
	}
	h := http.Header{}
	events, err := stream(body, providerwire.FakePiece)
	switch {
	case status < 300 && err == nil:
		body = providerwire.Encode(events)
		h.Set("Content-Type", "text/event-stream")
	case jsonType:
		h.Set("Content-Type", "application/json")
	default:
		h.Set("Content-Type", "text/html; charset=utf-8")
	}
	if retryAfter != "" && validHeaderValue(retryAfter) {
		h.Set("Retry-After", retryAfter)
	}
	if shouldRetry != "" && validHeaderValue(shouldRetry) {
		h.Set("X-Should-Retry", shouldRetry)
	}
	return cannedTransport{status: status, header: h, body: body}
}

func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' || b == 0x7f {
			return false
		}
	}
	return true
}

// checkTurn holds what any model's Turn must satisfy, whatever the
// provider answered: an answer above 399 is an *HTTPError carrying the
// status for the retry classifier; a 2xx is never one; every error names
// the call and never holds the API key; and a turn never reports negative
// tokens, which would hand the run budget back.
func checkTurn(t *testing.T, op string, resp cannedTransport, turn agentsagatype.ModelTurn, err error) {
	t.Helper()
	var httpErr *activities.HTTPError
	isHTTP := errors.As(err, &httpErr)
	switch {
	case resp.status >= 400:
		if !isHTTP {
			t.Fatalf("HTTP %d gave %v, want an *HTTPError", resp.status, err)
		}
		if httpErr.StatusCode != resp.status || httpErr.Op != op {
			t.Fatalf("HTTP %d: got HTTPError{Op: %q, StatusCode: %d}", resp.status, httpErr.Op, httpErr.StatusCode)
		}
		if httpErr.RetryAfter < 0 {
			t.Fatalf("HTTP %d: negative RetryAfter %v from Retry-After %q", resp.status, httpErr.RetryAfter, resp.header.Get("Retry-After"))
		}
		if len(httpErr.Body) > 512 {
			t.Fatalf("HTTP %d: error body is %d bytes, more than the 512 kept", resp.status, len(httpErr.Body))
		}
	case isHTTP && !strings.HasPrefix(httpErr.Op, op+": an error event after "):
		// Only an error event inside a 200 is classified as the status
		// its type stands for.
		t.Fatalf("HTTP %d is a success but gave an *HTTPError: %v", resp.status, err)
	}
	if err != nil {
		if !strings.HasPrefix(err.Error(), op+": ") {
			t.Fatalf("error %q does not name the call %q", err, op)
		}
		if strings.Contains(err.Error(), fuzzAPIKey) {
			t.Fatalf("error leaks the API key: %q", err)
		}
		if turn.Content != "" || turn.Refusal != "" || len(turn.ToolCalls) > 0 || turn.Model != "" || turn.Usage != (agentsagatype.Usage{}) {
			t.Fatalf("an error came with a turn: %+v", turn)
		}
		return
	}
	if turn.Usage.InputTokens < 0 || turn.Usage.OutputTokens < 0 || turn.Usage.Total() < 0 {
		t.Fatalf("turn reports negative usage %+v from %q", turn.Usage, resp.body)
	}
}

// sameOutcome checks that one answer always maps to the same turn: the
// workflow may replay a call's result, and a retry of the same answer must
// not read differently.
func sameOutcome(t *testing.T, turn1, turn2 agentsagatype.ModelTurn, err1, err2 error) {
	t.Helper()
	if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
		t.Fatalf("the same answer gave %v, then %v", err1, err2)
	}
	a, _ := json.Marshal(turn1)
	b, _ := json.Marshal(turn2)
	if !bytes.Equal(a, b) {
		t.Fatalf("the same answer gave two turns:\n%s\n%s", a, b)
	}
}

func FuzzOpenAITurn(f *testing.F) {
	for _, body := range []string{
		plainAnswer,
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"search","arguments":"{\"q\": \"x\"}"}},{"id":"call_b","type":"function","function":{"name":"fetch","arguments":"{\"url\": \"http://exa"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":50,"completion_tokens":20,"total_tokens":70}}`,
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"custom","custom":{"name":"grep","input":"raw text"}}]},"finish_reason":"tool_calls"}]}`,
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"now","arguments":""}}]}}]}`,
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`,
		`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1}}`,
		`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":-5,"completion_tokens":3}}`,
		`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":9223372036854775807}}`,
		`{"choices":[{"message":{"content":7}}]}`,
		`{"choices":null}`,
		`[]`,
		`null`,
		``,
		`{`,
		`<html>502 Bad Gateway</html>`,
		`{"error":{"message":"Invalid value for 'model'.","type":"invalid_request_error","param":"model","code":null}}`,
		`{"error":"model \"llama9\" not found"}`,
		`{"error":{"message":"bad key: Bearer ` + fuzzAPIKey + `","type":"invalid_request_error"}}`,
		// Streams as they are: cut before data: [DONE], an error event that
		// echoes the key, and chunks of two completions.
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"error\":{\"message\":\"bad key: Bearer " + fuzzAPIKey + "\"}}\n\n",
		"data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"id\":\"b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"!\"}}]}\n\ndata: [DONE]\n\n",
	} {
		f.Add(200, "", "", true, []byte(body))
	}
	f.Add(400, "", "", true, []byte(`{"error":{"message":"Invalid value for 'model'.","type":"invalid_request_error"}}`))
	f.Add(401, "", "", true, []byte(`{"error":{"message":"bad key: Bearer `+fuzzAPIKey+`"}}`))
	f.Add(429, "2", "false", true, []byte(`{"error":{"message":"Rate limit reached.","code":"rate_limit_exceeded"}}`))
	f.Add(503, "Wed, 21 Oct 2015 07:28:00 GMT", "true", true, []byte(`{"error":{"message":"overloaded"}}`))
	f.Add(502, "1e400", "", false, []byte(`<html>502 Bad Gateway</html>`))
	f.Add(200, "", "", false, []byte(plainAnswer))
	f.Fuzz(func(t *testing.T, status int, retryAfter, shouldRetry string, jsonType bool, body []byte) {
		resp := fuzzResponse(status, retryAfter, shouldRetry, jsonType, body, providerwire.ChatCompletionEvents)
		m, err := activities.NewOpenAIModel(agentsagatype.ModelSpec{
			Provider: agentsagatype.ProviderOpenAI, Name: "gpt-4o-mini", BaseURL: "http://fuzz.invalid/v1",
		}, fuzzAPIKey, &http.Client{Transport: resp, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("NewOpenAIModel: %v", err)
		}
		turn, err := m.Turn(context.Background(), userAsks("hi"))
		checkTurn(t, "openai chat.completions", resp, turn, err)
		turn2, err2 := m.Turn(context.Background(), userAsks("hi"))
		if resp.status < 400 { // an error's Retry-After date moves with the clock
			sameOutcome(t, turn, turn2, err, err2)
		}
	})
}

func FuzzAnthropicTurn(f *testing.F) {
	for _, body := range []string{
		anthropicPlainAnswer,
		`{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_01A","name":"search","input":{"q":"temporal","n":3}},{"type":"tool_use","id":"toolu_01B","name":"now","input":{}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":50,"output_tokens":20}}`,
		`{"id":"m","type":"message","role":"assistant","model":"c","content":[{"type":"tool_use","id":"t","name":"now","input":null}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`,
		`{"id":"m","type":"message","role":"assistant","model":"c","content":[{"type":"tool_use","id":"t","name":"now"}],"stop_reason":"tool_use"}`,
		`{"id":"m","type":"message","role":"assistant","model":"c","content":[{"type":"tool_use","id":"t","name":"x","input":[1,2]}]}`,
		`{"id":"m","type":"message","role":"assistant","model":"c","content":[{"type":"text","text":"I can't help with that."}],"stop_reason":"refusal","usage":{"input_tokens":5,"output_tokens":7}}`,
		`{"id":"m","type":"message","role":"assistant","model":"c","content":[],"stop_reason":"refusal","stop_details":{"explanation":"policy"},"usage":{"input_tokens":5,"output_tokens":7}}`,
		`{"id":"m","type":"message","role":"assistant","model":"c","content":[],"stop_reason":"refusal"}`,
		`{"id":"m","type":"message","role":"assistant","model":"c","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"a"},{"type":"text","text":"b"}],"stop_reason":"end_turn"}`,
		`{"content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":-9,"output_tokens":-1}}`,
		`{"content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":9223372036854775807,"output_tokens":1}}`,
		`{"content":"text"}`,
		`[]`,
		`null`,
		``,
		`{`,
		`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_011"}`,
		`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ` + fuzzAPIKey + `"}}`,
		// Streams as they are: cut before message_stop, an error event that
		// echoes the key, and a tool_use input that is not JSON.
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[]}}\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"x-api-key " + fuzzAPIKey + "\"}}\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"content\":[]}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"x\",\"input\":{}}}\n\n" +
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\"}}\n\n" +
			"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	} {
		f.Add(200, "", "", true, []byte(body))
	}
	f.Add(400, "", "", true, []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`))
	f.Add(401, "", "", true, []byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key `+fuzzAPIKey+`"}}`))
	f.Add(429, "7", "", true, []byte(`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`))
	f.Add(529, "", "true", true, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	f.Add(502, "Inf", "", false, []byte(`<html>502 Bad Gateway</html>`))
	f.Fuzz(func(t *testing.T, status int, retryAfter, shouldRetry string, jsonType bool, body []byte) {
		resp := fuzzResponse(status, retryAfter, shouldRetry, jsonType, body, providerwire.MessageEvents)
		m, err := activities.NewAnthropicModel(agentsagatype.ModelSpec{
			Provider: agentsagatype.ProviderAnthropic, Name: "claude-sonnet-4-5", BaseURL: "http://fuzz.invalid",
		}, fuzzAPIKey, &http.Client{Transport: resp, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("NewAnthropicModel: %v", err)
		}
		turn, err := m.Turn(context.Background(), userAsks("hi"))
		checkTurn(t, "anthropic messages", resp, turn, err)
		turn2, err2 := m.Turn(context.Background(), userAsks("hi"))
		if resp.status < 400 {
			sameOutcome(t, turn, turn2, err, err2)
		}
		if err != nil {
			return
		}
		// A refusal is final and is never also an answer.
		if turn.Refusal != "" && turn.Content != "" {
			t.Fatalf("turn is both a refusal and an answer: %+v", turn)
		}
		for i, call := range turn.ToolCalls {
			// The workflow checks arguments with json.Valid and sends them
			// back to the model as tool_use input: they must be JSON.
			if !json.Valid([]byte(call.Arguments)) {
				t.Fatalf("tool_calls[%d] arguments %q are not JSON", i, call.Arguments)
			}
		}
	})
}

// FuzzNewHTTPError checks the retry hints read from an error answer: a
// Retry-After is never negative, a server asking for a wait is never
// ignored, x-should-retry is read only when it is true or false, and the
// body kept is a prefix of the answer, at most 512 bytes, with no
// character cut in half.
func FuzzNewHTTPError(f *testing.F) {
	f.Add(503, "2", "", "true", []byte(`{"error":{"message":"overloaded"}}`))
	f.Add(429, "7", "250.5", "false", []byte("  rate limited \n"))
	f.Add(503, "Wed, 21 Oct 2015 07:28:00 GMT", "", "", []byte(nil))
	f.Add(503, "Fri, 01 Jan 2100 00:00:00 GMT", "", " TRUE ", []byte("x"))
	f.Add(500, "-3", "-1", "maybe", []byte(strings.Repeat("é", 400)))
	f.Add(500, "soon", "NaN", "", []byte(strings.Repeat("a", 511)+"é"))
	f.Add(500, "1e-12", "1e-9", "", []byte("\xff\xfe"))
	f.Add(502, "1e300", "", "", []byte("x"))
	f.Add(502, "Inf", "", "", []byte("x"))
	f.Add(502, "", "+Inf", "", []byte("x"))
	f.Add(502, "0x1p62", "", "", []byte("x"))
	f.Fuzz(func(t *testing.T, status int, retryAfter, retryAfterMs, shouldRetry string, body []byte) {
		h := http.Header{}
		for name, v := range map[string]string{"Retry-After": retryAfter, "Retry-After-Ms": retryAfterMs, "X-Should-Retry": shouldRetry} {
			if v != "" {
				h.Set(name, v)
			}
		}
		resp := &http.Response{StatusCode: status, Header: h}
		e := activities.NewHTTPError("tool t", resp, body)

		if e.StatusCode != status || e.Op != "tool t" {
			t.Fatalf("NewHTTPError lost the status or op: %+v", e)
		}
		if e.RetryAfter < 0 {
			t.Fatalf("RetryAfter %v is negative (Retry-After %q, retry-after-ms %q)", e.RetryAfter, retryAfter, retryAfterMs)
		}
		if e.RetryAfter == 0 {
			// A numeric hint of at least a nanosecond asks for a wait and
			// must not be dropped, however large it is.
			ms, msErr := strconv.ParseFloat(strings.TrimSpace(retryAfterMs), 64)
			s, sErr := strconv.ParseFloat(strings.TrimSpace(retryAfter), 64)
			msUsed := msErr == nil && ms > 0 // else Retry-After is read
			switch {
			case msUsed && ms*float64(time.Millisecond) >= 1:
				t.Fatalf("retry-after-ms %q was ignored", retryAfterMs)
			case !msUsed && sErr == nil && s*float64(time.Second) >= 1:
				t.Fatalf("Retry-After %q was ignored", retryAfter)
			}
		}
		switch v := strings.ToLower(strings.TrimSpace(shouldRetry)); {
		case v == "true" || v == "false":
			if e.ShouldRetry == nil || *e.ShouldRetry != (v == "true") {
				t.Fatalf("x-should-retry %q read as %v", shouldRetry, e.ShouldRetry)
			}
		case e.ShouldRetry != nil:
			t.Fatalf("x-should-retry %q read as %v, want absent", shouldRetry, *e.ShouldRetry)
		}

		trimmed := strings.TrimSpace(string(body))
		if len(e.Body) > 512 || !strings.HasPrefix(trimmed, e.Body) {
			t.Fatalf("body %q is not a prefix of at most 512 bytes of %q", e.Body, trimmed)
		}
		if len(trimmed) <= 512 && e.Body != trimmed {
			t.Fatalf("a short body was cut: %q from %q", e.Body, trimmed)
		}
		if utf8.ValidString(trimmed) && !utf8.ValidString(e.Body) {
			t.Fatalf("cutting the body split a character: %q", e.Body)
		}
		if want := "tool t: HTTP " + strconv.Itoa(status); !strings.HasPrefix(e.Error(), want) {
			t.Fatalf("Error() = %q, want it to start with %q", e.Error(), want)
		}
		// The classifier reads only what NewHTTPError kept.
		budget.RetryableStatus(e.StatusCode, e.ShouldRetry)
	})
}
