package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// opGenerateContent names the call in every error Turn returns.
const opGenerateContent = "gemini streamGenerateContent"

// defaultGeminiBaseURL is the Gemini Developer API's server root; the SDK
// appends the API version and models/{model}:streamGenerateContent to it,
// so a spec's BaseURL is the server root too. It is always set, so that
// GOOGLE_GEMINI_BASE_URL in the worker's environment cannot send a run
// somewhere its spec does not say.
const defaultGeminiBaseURL = "https://generativelanguage.googleapis.com/"

// geminiAPIVersion is the REST version the requests use: the one Google's
// docs for thinking, thought signatures and function calling document. It
// is set explicitly, so that GOOGLE_GENAI_API_VERSION cannot change it.
const geminiAPIVersion = "v1beta"

// geminiModel is a Model served by Google's Gemini Developer API.
type geminiModel struct {
	client *genai.Client
	spec   agentsagatype.ModelSpec
	apiKey string // kept only to redact it from errors
}

var _ Model = (*geminiModel)(nil)

// newGeminiModel builds a model for spec on the Gemini Developer API,
// authenticated by apiKey (sent as x-goog-api-key). httpClient may be nil
// to use a plain one.
//
// Nothing is read from the environment: the SDK would otherwise take a key
// from GOOGLE_API_KEY or GEMINI_API_KEY when apiKey is empty, the server
// from GOOGLE_GEMINI_BASE_URL, the API version from GOOGLE_GENAI_API_VERSION
// and the backend from GOOGLE_GENAI_USE_VERTEXAI, so the key is required
// and everything else is set. Vertex AI (model.project, model.region) is
// not supported: it authenticates with Google Cloud credentials, which the
// SDK finds only in the environment (Application Default Credentials).
//
// The SDK's own retries are off (one attempt, and no automatic
// continuation of a stream): Temporal's activity retry is the only retry
// loop.
func newGeminiModel(spec agentsagatype.ModelSpec, apiKey string, httpClient *http.Client) (Model, error) {
	switch {
	case spec.Provider != agentsagatype.ProviderGemini:
		return nil, fmt.Errorf("gemini model: provider is %q, want %q", spec.Provider, agentsagatype.ProviderGemini)
	case spec.Name == "":
		return nil, fmt.Errorf("gemini model: model name is empty")
	case spec.Project != "" || spec.Region != "":
		return nil, fmt.Errorf("gemini model: model.project and model.region name a Vertex AI model, which this provider does not call " +
			"(Vertex AI needs Google Cloud credentials, which would come from the worker's environment); use the Gemini API with model.api_key_env")
	case apiKey == "":
		// An empty key would make the SDK look for one in the environment.
		return nil, fmt.Errorf("gemini model: no API key: the Gemini API needs one (set model.api_key_env)")
	}
	baseURL := spec.BaseURL
	if baseURL == "" {
		baseURL = defaultGeminiBaseURL
	}
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	// The worker's client, with its transport wrapped to keep the answer
	// the SDK reads: its status and headers decide retries, and the SDK's
	// error drops the headers.
	wrapped := *httpClient
	wrapped.Transport = geminiTransport{base: httpClient.Transport}
	client, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey:     apiKey,
		Backend:    genai.BackendGeminiAPI,
		HTTPClient: &wrapped,
		HTTPOptions: genai.HTTPOptions{
			BaseURL:    baseURL,
			APIVersion: geminiAPIVersion,
			// One attempt: nil options mean one too, but the SDK's
			// default may change; Attempts 1 says it.
			RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)},
		},
	})
	if err != nil {
		// The SDK's errors can quote its whole config, key included.
		return nil, newRedactor([]string{apiKey}).wrap(fmt.Errorf("gemini model: %w", err))
	}
	return &geminiModel{client: client, spec: spec, apiKey: apiKey}, nil
}

// Turn makes exactly one streamed generateContent request, handing each
// piece of the answer's text to req.OnText as it arrives. A non-2xx answer
// is returned as *HTTPError so the retry classifier can read the status and
// Retry-After; a stream that breaks after it began (an error event, a cut
// connection, no finishReason) is a plain (retryable) error that says how
// far it got, never a partial turn; anything else is wrapped with the op.
func (m *geminiModel) Turn(ctx context.Context, req ModelRequest) (agentsagatype.ModelTurn, error) {
	contents, config, err := m.request(req)
	if err != nil {
		return agentsagatype.ModelTurn{}, fmt.Errorf("%s: %w", opGenerateContent, err)
	}
	answer := &geminiAnswer{}
	var reply geminiReply
	chunks := 0
	var streamErr error
	for chunk, err := range m.client.Models.GenerateContentStream(context.WithValue(ctx, geminiAnswerKey{}, answer), m.spec.Name, contents, config) {
		if err != nil {
			streamErr = err
			break
		}
		chunks++
		if err := reply.add(chunk, req.OnText); err != nil {
			streamErr = err
			break
		}
	}
	noteResponse(ctx, answer.resp)
	if streamErr != nil {
		return agentsagatype.ModelTurn{}, m.failed(answer, chunks, streamErr)
	}
	return reply.turn(m.apiKey, chunks)
}

// failed is the error of a call that failed: the API's refusal of the
// request as *HTTPError, a stream broken part-way as streamBroke, anything
// else (a connection refused, a cancelled context) wrapped with the op.
func (m *geminiModel) failed(answer *geminiAnswer, chunks int, err error) error {
	redact := newRedactor([]string{m.apiKey})
	if answer.resp != nil && answer.resp.StatusCode >= 400 {
		e := newHTTPError(opGenerateContent, answer.resp, []byte(redact.redact(string(answer.body))))
		if e.RetryAfter == 0 {
			e.RetryAfter = geminiRetryDelay(answer.body)
		}
		return e
	}
	var apiErr genai.APIError
	isAPIErr := errors.As(err, &apiErr)
	if chunks == 0 && isAPIErr && apiErr.Code >= 400 {
		// The answer was not seen (a client whose transport is not
		// ours); the SDK's error still has the status.
		return &HTTPError{Op: opGenerateContent, StatusCode: apiErr.Code, Body: truncateBody([]byte(redact.redact(apiErr.Message)))}
	}
	if answer.resp == nil && chunks == 0 {
		return redact.wrap(fmt.Errorf("%s: %w", opGenerateContent, err))
	}
	if isAPIErr {
		// An error event in the stream of a 200.
		data, _ := json.Marshal(apiErr)
		err = errorEvent(m.apiKey, data)
	}
	return streamBroke(opGenerateContent, m.apiKey, chunks, "chunks", err)
}

// geminiRetryDelay is the wait an error body asks for: Google's APIs
// say it in the error's details, as a google.rpc.RetryInfo's retryDelay
// ("7s", "0.5s"), rather than in a Retry-After header. 0 if absent.
func geminiRetryDelay(body []byte) time.Duration {
	var e struct {
		Error struct {
			Details []struct {
				Type       string `json:"@type"`
				RetryDelay string `json:"retryDelay"`
			} `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return 0
	}
	for _, d := range e.Error.Details {
		if d.Type != "type.googleapis.com/google.rpc.RetryInfo" {
			continue
		}
		if wait, err := time.ParseDuration(d.RetryDelay); err == nil && wait > 0 {
			return wait
		}
	}
	return 0
}

// geminiAnswerKey carries a Turn's *geminiAnswer to the transport in the
// request's context.
type geminiAnswerKey struct{}

// geminiAnswer is the HTTP answer to a Turn's request, as the transport saw
// it, with the body of an error answer.
type geminiAnswer struct {
	resp *http.Response
	body []byte
}

// geminiTransport notes the answer to a request whose context carries a
// *geminiAnswer, and keeps a copy of an error answer's body, which the SDK
// reads and turns into an error without the headers.
type geminiTransport struct{ base http.RoundTripper }

func (t geminiTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(r)
	answer, ok := r.Context().Value(geminiAnswerKey{}).(*geminiAnswer)
	if err != nil || !ok || resp == nil {
		return resp, err
	}
	answer.resp = resp
	if resp.StatusCode >= 400 && resp.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		answer.body = body
		resp.Body = io.NopCloser(bytes.NewReader(body))
	}
	return resp, nil
}

// geminiRefusals are the finish reasons that mean the model would not
// answer: a refusal, never retried.
var geminiRefusals = map[genai.FinishReason]bool{
	genai.FinishReasonSafety:                 true,
	genai.FinishReasonProhibitedContent:      true,
	genai.FinishReasonBlocklist:              true,
	genai.FinishReasonSPII:                   true,
	genai.FinishReasonRecitation:             true,
	genai.FinishReasonImageSafety:            true,
	genai.FinishReasonImageProhibitedContent: true,
	genai.FinishReasonModelArmor:             true,
}

// geminiReply accumulates a streamed reply: each chunk holds the next
// parts of the first candidate, and the usage so far.
type geminiReply struct {
	model         string
	usage         *genai.GenerateContentResponseUsageMetadata
	blocked       *genai.GenerateContentResponsePromptFeedback
	finish        genai.FinishReason
	finishMessage string
	text          strings.Builder
	calls         []agentsagatype.ToolCall
	parts         []geminiPartRef
	signed        bool
}

func (r *geminiReply) add(chunk *genai.GenerateContentResponse, onText func(string)) error {
	if chunk == nil {
		return nil
	}
	if chunk.ModelVersion != "" {
		r.model = chunk.ModelVersion
	}
	if chunk.UsageMetadata != nil {
		// A running total: the last one is the reply's.
		r.usage = chunk.UsageMetadata
	}
	if f := chunk.PromptFeedback; f != nil && f.BlockReason != "" {
		r.blocked = f
	}
	if len(chunk.Candidates) == 0 || chunk.Candidates[0] == nil {
		return nil
	}
	cand := chunk.Candidates[0]
	if cand.FinishReason != "" && cand.FinishReason != genai.FinishReasonUnspecified {
		r.finish, r.finishMessage = cand.FinishReason, cand.FinishMessage
	}
	if cand.Content == nil {
		return nil
	}
	for _, p := range cand.Content.Parts {
		if p == nil {
			continue
		}
		if len(p.ThoughtSignature) > 0 {
			r.signed = true
		}
		switch {
		case p.FunctionCall != nil:
			if err := r.addCall(p); err != nil {
				return err
			}
		case p.Thought:
			// A thought summary is not the answer. Only a signed one is
			// kept, to go back with its signature.
			if len(p.ThoughtSignature) > 0 {
				r.parts = append(r.parts, geminiPartRef{Thought: true, Text: p.Text, Signature: p.ThoughtSignature})
			}
		case p.Text != "" || len(p.ThoughtSignature) > 0:
			r.text.WriteString(p.Text)
			if p.Text != "" && onText != nil {
				onText(p.Text)
			}
			// Unsigned text streamed in pieces is one part; a signed part
			// stays as it came, with its own text.
			if n := len(r.parts); n > 0 && len(p.ThoughtSignature) == 0 && r.parts[n-1].isPlainText() {
				r.parts[n-1].TextBytes += len(p.Text)
				continue
			}
			r.parts = append(r.parts, geminiPartRef{TextBytes: len(p.Text), Signature: p.ThoughtSignature})
		}
	}
	return nil
}

// addCall keeps a function call. Gemini may leave its id out: the call
// then gets one made from its place and name, the same on every attempt.
func (r *geminiReply) addCall(p *genai.Part) error {
	fc := p.FunctionCall
	if fc.Name == "" {
		return fmt.Errorf("function call %d has no name", len(r.calls))
	}
	id, noID := fc.ID, fc.ID == ""
	if noID {
		id = fmt.Sprintf("call_%d_%s", len(r.calls), fc.Name)
	}
	args := "{}"
	if len(fc.Args) > 0 {
		b, err := json.Marshal(fc.Args)
		if err != nil {
			return fmt.Errorf("function call %s: its arguments: %w", fc.Name, err)
		}
		args = string(b)
	}
	r.calls = append(r.calls, agentsagatype.ToolCall{ID: id, Name: fc.Name, Arguments: args})
	r.parts = append(r.parts, geminiPartRef{Call: id, NoID: noID, Signature: p.ThoughtSignature})
	return nil
}

// turn is the whole reply, once the stream ended without an error.
func (r *geminiReply) turn(apiKey string, chunks int) (agentsagatype.ModelTurn, error) {
	switch {
	case r.finish == "" && r.blocked == nil:
		return agentsagatype.ModelTurn{}, streamBroke(opGenerateContent, apiKey, chunks, "chunks", errors.New("it ended without a finishReason"))
	case r.finish == genai.FinishReasonContinuation && r.blocked == nil:
		// The rest would come from another request, which the SDK's
		// automatic continuation (off: one request per Turn) would send.
		return agentsagatype.ModelTurn{}, streamBroke(opGenerateContent, apiKey, chunks, "chunks", errors.New("it ended with finishReason CONTINUATION, before the answer did"))
	}
	turn := agentsagatype.ModelTurn{Model: r.model}
	if u := r.usage; u != nil {
		// promptTokenCount counts the cached part too; thinking is billed
		// as output.
		turn.Usage = reportedUsage(int64(u.PromptTokenCount)+int64(u.ToolUsePromptTokenCount),
			int64(u.CandidatesTokenCount)+int64(u.ThoughtsTokenCount), int64(u.CachedContentTokenCount), 0)
	}
	switch {
	case r.blocked != nil:
		turn.Refusal = "Gemini blocked the prompt (blockReason " + string(r.blocked.BlockReason) + ")"
		if r.blocked.BlockReasonMessage != "" {
			turn.Refusal += ": " + r.blocked.BlockReasonMessage
		}
		return turn, nil
	case geminiRefusals[r.finish]:
		turn.Refusal = "Gemini stopped the answer (finishReason " + string(r.finish) + ")"
		if r.finishMessage != "" {
			turn.Refusal += ": " + r.finishMessage
		}
		return turn, nil
	case r.finish == genai.FinishReasonMissingThoughtSignature:
		// The request lacked a signature: sending it again cannot help.
		return agentsagatype.ModelTurn{}, &permanentError{Err: fmt.Errorf("%s: finishReason %s: %s", opGenerateContent, r.finish, r.finishMessage)}
	case r.finish == genai.FinishReasonMalformedFunctionCall:
		// The model wrote a call that is not one; another attempt may not.
		return agentsagatype.ModelTurn{}, fmt.Errorf("%s: finishReason %s: %s", opGenerateContent, r.finish, truncateBody([]byte(r.finishMessage)))
	}
	turn.Content, turn.ToolCalls = r.text.String(), r.calls
	if r.signed {
		data, err := json.Marshal(geminiReasoning{Parts: r.parts})
		if err != nil {
			return agentsagatype.ModelTurn{}, fmt.Errorf("%s: keeping the thought signatures: %w", opGenerateContent, err)
		}
		turn.Reasoning = &agentsagatype.Reasoning{Provider: reasoningGemini, Data: data}
	}
	return turn, nil
}

// geminiReasoning is a reply's thought signatures as a turn keeps them
// (Reasoning.Data): the reply's parts in order, each with the signature it
// came with, so that the turn goes back with every signature on the part
// it came with. The text and calls themselves are the turn's (Content and
// ToolCalls): a part refers to them, and only a signed thought summary
// keeps its own text.
type geminiReasoning struct {
	Parts []geminiPartRef `json:"parts"`
}

// geminiPartRef is one part of a reply: a function call (Call, the
// ToolCall's ID; NoID when Gemini sent no id and the ID was made up), a
// piece of the answer's text (the next TextBytes bytes of Content), or a
// signed thought summary (Thought, with its Text).
type geminiPartRef struct {
	Call      string `json:"call,omitempty"`
	NoID      bool   `json:"no_id,omitempty"`
	TextBytes int    `json:"text_bytes,omitempty"`
	Thought   bool   `json:"thought,omitempty"`
	Text      string `json:"text,omitempty"`
	Signature []byte `json:"signature,omitempty"`
}

func (p geminiPartRef) isPlainText() bool {
	return p.Call == "" && !p.Thought && len(p.Signature) == 0
}

// request translates the provider-neutral request to the SDK's. System
// messages, wherever they stand, become the system instruction; the rest
// become user and model turns, consecutive ones of the same role (tool
// results above all) merged into one.
func (m *geminiModel) request(req ModelRequest) ([]*genai.Content, *genai.GenerateContentConfig, error) {
	config := &genai.GenerateContentConfig{
		// A stream that ends with finishReason CONTINUATION would
		// otherwise be followed by more requests, and a dropped one
		// reconnected: one attempt per Turn.
		AutomaticContinuation: genai.Ptr(false),
	}
	if m.spec.MaxTokens > 0 {
		config.MaxOutputTokens = clampInt32(m.spec.MaxTokens)
	}
	if t := m.spec.Thinking; t != nil {
		// 0 turns thinking off, -1 lets the model decide.
		config.ThinkingConfig = &genai.ThinkingConfig{ThinkingBudget: genai.Ptr(clampInt32(t.BudgetTokens))}
	}
	var system []string
	var contents []*genai.Content
	// calls are the tool calls of the last model turn, by ID, to name
	// the function each result answers.
	calls := map[string]geminiCall{}
	for i, msg := range req.Messages {
		var role string
		var parts []*genai.Part
		switch msg.Role {
		case "system":
			if strings.TrimSpace(msg.Content) != "" {
				system = append(system, msg.Content)
			}
			continue
		case "user":
			role = genai.RoleUser
			if msg.Content != "" {
				parts = []*genai.Part{{Text: msg.Content}}
			}
		case "assistant":
			role = genai.RoleModel
			parts, calls = geminiModelParts(msg)
		case "tool":
			role = genai.RoleUser
			call, ok := calls[msg.ToolCallID]
			if !ok {
				call = geminiCall{name: msg.Name, id: msg.ToolCallID}
			}
			if call.name == "" {
				return nil, nil, fmt.Errorf("messages[%d]: the tool result %q names no function, and no call before it has its id", i, msg.ToolCallID)
			}
			parts = []*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: call.id, Name: call.name,
				Response: map[string]any{"output": msg.Content}}}}
		default:
			return nil, nil, fmt.Errorf("messages[%d]: unknown role %q", i, msg.Role)
		}
		if len(parts) == 0 {
			continue
		}
		if n := len(contents); n > 0 && contents[n-1].Role == role {
			contents[n-1].Parts = append(contents[n-1].Parts, parts...)
			continue
		}
		contents = append(contents, &genai.Content{Role: role, Parts: parts})
	}
	if len(system) > 0 {
		config.SystemInstruction = &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{Text: strings.Join(system, "\n\n")}}}
	}
	var decls []*genai.FunctionDeclaration
	for i, tool := range req.Tools {
		decl := &genai.FunctionDeclaration{Name: tool.Name, Description: tool.Description}
		if params := bytes.TrimSpace(tool.Parameters); len(params) > 0 && !bytes.Equal(params, []byte("null")) {
			if !json.Valid(params) || params[0] != '{' {
				return nil, nil, fmt.Errorf("tools[%d] (%s): parameters: not a JSON object", i, tool.Name)
			}
			decl.ParametersJsonSchema = json.RawMessage(params)
		}
		decls = append(decls, decl)
	}
	if len(decls) > 0 {
		config.Tools = []*genai.Tool{{FunctionDeclarations: decls}}
	}
	return contents, config, nil
}

// geminiCall is a function call as its result must name it: the function,
// and the id Gemini gave the call ("" when it gave none).
type geminiCall struct{ name, id string }

// geminiModelParts is an assistant message as a model turn, and its calls
// by ID. With the reasoning Gemini wrote for it, the parts are the reply's
// own, in its order, each with the signature it came with; when the
// message no longer matches its reasoning (its text was changed, say),
// the calls still get theirs. Reasoning another provider wrote is left out.
func geminiModelParts(msg agentsagatype.Message) ([]*genai.Part, map[string]geminiCall) {
	var kept geminiReasoning
	if r := msg.Reasoning; r != nil && r.Provider == reasoningGemini {
		if json.Unmarshal(r.Data, &kept) != nil {
			kept = geminiReasoning{}
		}
	}
	byID := map[string]agentsagatype.ToolCall{}
	for _, c := range msg.ToolCalls {
		byID[c.ID] = c
	}
	refs := map[string]geminiPartRef{}
	for _, p := range kept.Parts {
		if p.Call != "" {
			refs[p.Call] = p
		}
	}
	calls := map[string]geminiCall{}
	callPart := func(c agentsagatype.ToolCall, ref geminiPartRef) *genai.Part {
		id := c.ID
		if ref.NoID {
			id = ""
		}
		calls[c.ID] = geminiCall{name: c.Name, id: id}
		return &genai.Part{FunctionCall: &genai.FunctionCall{ID: id, Name: c.Name, Args: geminiArgs(c.Arguments)},
			ThoughtSignature: ref.Signature}
	}
	if geminiPartsMatch(kept.Parts, msg, byID) {
		parts := make([]*genai.Part, 0, len(kept.Parts))
		off := 0
		for _, p := range kept.Parts {
			switch {
			case p.Call != "":
				parts = append(parts, callPart(byID[p.Call], p))
			case p.Thought:
				parts = append(parts, &genai.Part{Text: p.Text, Thought: true, ThoughtSignature: p.Signature})
			default:
				parts = append(parts, &genai.Part{Text: msg.Content[off : off+p.TextBytes], ThoughtSignature: p.Signature})
				off += p.TextBytes
			}
		}
		return parts, calls
	}
	var parts []*genai.Part
	if msg.Content != "" {
		parts = append(parts, &genai.Part{Text: msg.Content})
	}
	for _, c := range msg.ToolCalls {
		parts = append(parts, callPart(c, refs[c.ID]))
	}
	return parts, calls
}

// geminiPartsMatch says whether kept describes msg: its text pieces add up
// to the message's text, and its calls are the message's, each once.
func geminiPartsMatch(kept []geminiPartRef, msg agentsagatype.Message, byID map[string]agentsagatype.ToolCall) bool {
	if len(kept) == 0 || len(byID) != len(msg.ToolCalls) {
		return false
	}
	text, seen := 0, map[string]bool{}
	for _, p := range kept {
		switch {
		case p.Call != "":
			if _, ok := byID[p.Call]; !ok || seen[p.Call] {
				return false
			}
			seen[p.Call] = true
		case !p.Thought:
			if p.TextBytes < 0 {
				return false
			}
			text += p.TextBytes
		}
	}
	return text == len(msg.Content) && len(seen) == len(msg.ToolCalls)
}

// geminiArgs is a tool call's arguments as the object functionCall.args
// needs. Arguments that are not a JSON object are kept, as text, under
// "_raw", so the conversation still shows what was asked.
func geminiArgs(arguments string) map[string]any {
	trimmed := strings.TrimSpace(arguments)
	if trimmed == "" {
		return map[string]any{}
	}
	var args map[string]any
	if strings.HasPrefix(trimmed, "{") && json.Unmarshal([]byte(trimmed), &args) == nil && args != nil {
		return args
	}
	return map[string]any{"_raw": arguments}
}

// clampInt32 is n within int32, which the API's token counts are.
func clampInt32(n int64) int32 {
	return int32(max(min(n, math.MaxInt32), math.MinInt32))
}
