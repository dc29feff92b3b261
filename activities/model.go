package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// reportedUsage is the token counts a provider reported, as the run is
// charged for them: a negative count, which no real call has but a broken
// or hostile server can send, counts as zero, since it would hand tokens
// back to the run's budget. cached (read from the prompt cache) and written
// (to it) are parts of input.
func reportedUsage(input, output, cached, written int64) agentsagatype.Usage {
	input = max(input, 0)
	cached = min(max(cached, 0), input)
	return agentsagatype.Usage{InputTokens: input, OutputTokens: max(output, 0), CachedInputTokens: cached,
		CacheWriteTokens: min(max(written, 0), input-cached)}
}

// maxWholeReply bounds a reply read whole, rather than streamed.
const maxWholeReply = 16 << 20

// protocolError is a 200 whose body is neither the stream the request
// asked for nor a whole completion: the server speaks something else (a
// login page, a proxy's notice, another API). Another attempt would get
// the same, so it is not retried and never counts toward a breaker.
type protocolError struct {
	op, contentType string
	head            []byte
}

func (e *protocolError) Error() string {
	return fmt.Sprintf("%s: the server answered 200 with %q, neither a stream nor a completion; it does not speak this API (its base_url may be wrong): %q",
		e.op, e.contentType, e.head)
}

// wholeReply watches the answer to a streamed request. Some compatible
// servers and gateways answer "stream": true with one whole JSON
// completion; a server that answers is not down, so that body is kept for
// the decoder to read whole, and the SDK's stream sees no events. A body
// that is an event stream under another content type is handed on as one.
type wholeReply struct {
	body        []byte // the whole JSON body, when the answer was one
	contentType string
	other       []byte // the head of a body that is neither
	sawOther    bool
}

// watch reads resp's body, when resp is a 2xx that is not labelled an
// event stream, and decides what it is.
func (w *wholeReply) watch(resp *http.Response) {
	if resp == nil || resp.Body == nil || resp.StatusCode >= 300 {
		return
	}
	w.contentType = resp.Header.Get("Content-Type")
	if media, _, _ := mime.ParseMediaType(w.contentType); streamTypes[media] {
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxWholeReply))
	resp.Body.Close()
	if err != nil {
		// The body broke while it was read: the SDK's stream reports a
		// broken stream.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n\ufeff")
	switch {
	case len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed):
		w.body = trimmed
		resp.Body = io.NopCloser(bytes.NewReader(nil))
	case looksLikeEventStream(trimmed):
		resp.Body = io.NopCloser(bytes.NewReader(body))
	default:
		w.sawOther = true
		w.other = body[:min(len(body), 200)]
		resp.Body = io.NopCloser(bytes.NewReader(nil))
	}
}

// streamTypes are the content types a stream comes in: server-sent
// events, and Bedrock's binary event stream (which its SDK decodes).
var streamTypes = map[string]bool{"text/event-stream": true, "application/vnd.amazon.eventstream": true}

// protocolErr is the error of an answer that was neither, or nil.
func (w *wholeReply) protocolErr(op string) error {
	if !w.sawOther {
		return nil
	}
	return &protocolError{op: op, contentType: w.contentType, head: w.other}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// looksLikeEventStream says whether body begins as server-sent events do:
// a field line (data, event, id, retry) or a comment.
func looksLikeEventStream(body []byte) bool {
	line, _, _ := bytes.Cut(body, []byte("\n"))
	for _, field := range []string{"data:", "event:", "id:", "retry:", ":"} {
		if bytes.HasPrefix(line, []byte(field)) {
			return true
		}
	}
	return false
}

// errorTypeStatus is the HTTP status each provider answers with the error
// types it also sends inside a stream (OpenAI's and Anthropic's error
// types, and the compatible servers' own), so that an error event is
// classified as its status would be.
var errorTypeStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"invalid_request":       http.StatusBadRequest,
	"bad_request":           http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"permission_error":      http.StatusForbidden,
	"permission_denied":     http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"not_found":             http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"rate_limit_exceeded":   http.StatusTooManyRequests,
	"tokens":                http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"server_error":          http.StatusInternalServerError,
	"internal_error":        http.StatusInternalServerError,
	"timeout_error":         http.StatusGatewayTimeout,
	"service_unavailable":   http.StatusServiceUnavailable,
	"overloaded_error":      529,
}

// errorEventStatus is the status an error event stands for: its numeric
// code when it has one in the HTTP range, else its type's (error.type,
// error.code, or the event's own type); 0 when nothing says.
func errorEventStatus(data []byte) int {
	var event struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &event) != nil {
		return 0
	}
	var detail struct {
		Type   string          `json:"type"`
		Code   json.RawMessage `json:"code"`
		Status json.RawMessage `json:"status"`
	}
	_ = json.Unmarshal(event.Error, &detail)
	for _, raw := range []json.RawMessage{detail.Code, detail.Status} {
		var n int
		if json.Unmarshal(raw, &n) == nil && n >= 400 && n < 600 {
			return n
		}
	}
	var code string
	_ = json.Unmarshal(detail.Code, &code)
	for _, name := range []string{detail.Type, code, event.Type} {
		if status, ok := errorTypeStatus[strings.ToLower(name)]; ok {
			return status
		}
	}
	return 0
}

// streamErrorEvent is the error of a stream that an error event ended
// after n units: classified as the HTTP status its type stands for (an
// overloaded_error is retryable, an invalid_request_error is not), or a
// broken stream (retryable) when its type says nothing.
func streamErrorEvent(op, apiKey string, n int, unit string, data []byte) error {
	status := errorEventStatus(data)
	if status == 0 {
		return streamBroke(op, apiKey, n, unit, errorEvent(apiKey, data))
	}
	body := truncateBody([]byte(newRedactor([]string{apiKey}).redact(string(data))))
	return &eventError{
		message: fmt.Sprintf("%s: the stream broke after %d %s: error event: %s (classified as HTTP %d)", op, n, unit, body, status),
		status:  &HTTPError{Op: fmt.Sprintf("%s: an error event after %d %s", op, n, unit), StatusCode: status, Body: body},
	}
}

// eventError is an error event that stands for an HTTP status: it reads
// as the broken stream it is, and is classified as its status.
type eventError struct {
	message string
	status  *HTTPError
}

func (e *eventError) Error() string { return e.message }
func (e *eventError) Unwrap() error { return e.status }

// streamBroke is the error of a reply stream that failed after it began,
// having brought n of its units (chunks, events): a plain error, which
// classify makes retryable, since another attempt may well bring the whole
// reply; what the server sent has the API key redacted.
func streamBroke(op, apiKey string, n int, unit string, cause error) error {
	return newRedactor([]string{apiKey}).wrap(fmt.Errorf("%s: the stream broke after %d %s: %w", op, n, unit, cause))
}

// errorEvent is the cause of a stream that an error event broke: the
// event's data, with the API key redacted before it is cut to size, so
// that no part of the key is left at the cut.
func errorEvent(apiKey string, data []byte) error {
	return fmt.Errorf("error event: %s", truncateBody([]byte(newRedactor([]string{apiKey}).redact(string(data)))))
}

// ModelRequest is one call to a model.
type ModelRequest struct {
	Messages []agentsagatype.Message `json:"messages"`
	Tools    []agentsagatype.ToolDef `json:"tools,omitempty"`
	// Finish marks the graceful-finish call: the budget is nearly spent,
	// the instructions have switched, and no tools are offered.
	Finish bool `json:"finish,omitempty"`
	// OmittedTurns counts the oldest turns left out of Messages to fit the
	// context budget (a scripted model counts them as played).
	OmittedTurns int `json:"omitted_turns,omitempty"`
	// OnText, when set, is handed the reply's text as it streams, chunk by
	// chunk, in order, on the goroutine that called Turn and never after
	// Turn returns; the chunks of a reply that succeeds add up to its
	// Content (a reply the model ends as a refusal may have streamed text
	// that the turn returns as its Refusal instead: the stop reason comes
	// last). A model that does not stream never calls it. It is for the
	// run's watchers (the event log, issue 33): the turn Turn returns is
	// what the run receives, streamed or not.
	OnText func(chunk string) `json:"-"`
	// CacheKey is a key that keeps one run's requests together in the
	// provider's prompt cache (OpenAI's prompt_cache_key): the workflow ID.
	CacheKey string `json:"-"`
}

// Model is a chat model that can ask for tool calls. Implementations make
// exactly one attempt per call: Temporal's activity retry is the only retry
// loop, so client-side retries stay off.
type Model interface {
	Turn(ctx context.Context, req ModelRequest) (agentsagatype.ModelTurn, error)
}

// speaksAnthropic says whether spec's provider speaks Anthropic's
// Messages API (directly, on Bedrock or on Vertex AI).
func speaksAnthropic(spec agentsagatype.ModelSpec) bool {
	switch spec.Provider {
	case agentsagatype.ProviderAnthropic, agentsagatype.ProviderBedrock, agentsagatype.ProviderVertex:
		return true
	}
	return false
}

// The wire formats a turn's Reasoning is kept in (its Provider).
const (
	reasoningAnthropic       = "anthropic"
	reasoningOpenAIResponses = "openai-responses"
	reasoningGemini          = "gemini"
)

// cachesPrompt says whether spec's requests ask the provider to cache
// their stable prefix: the default, unless model.cache is false.
func cachesPrompt(spec agentsagatype.ModelSpec) bool { return spec.Cache == nil || *spec.Cache }

// writesPromptCache says whether a model's requests may write its
// provider's prompt cache, which costs more than plain input: Anthropic's
// do, when caching is on (it is by default); OpenAI's and Gemini's caches
// are written for free.
func writesPromptCache(spec agentsagatype.ModelSpec) bool {
	return speaksAnthropic(spec) && cachesPrompt(spec)
}
