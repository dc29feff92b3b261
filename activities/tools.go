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
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentsaga/agentsaga/budget"
)

// Tool kinds a ToolSpec may declare.
const (
	ToolKindGo   = "go"
	ToolKindHTTP = "http"
	// ToolKindAgent is a sub-agent: the workflow runs it as a child
	// workflow, never as an activity.
	ToolKindAgent = "agent"
	// ToolKindMCP is an MCP server (url: streamable HTTP; command: stdio,
	// started by the worker), or one tool of it once the run has listed
	// the server (mcp_tool set): see mcp.go.
	ToolKindMCP = "mcp"
)

// MaxToolOutput is how much of a tool's answer is kept, of every kind of
// tool; the rest is cut and marked, so one chatty tool cannot fill the
// ledger, workflow history (whose payloads are capped at 2 MiB) or the
// model's context.
const MaxToolOutput = 64 << 10

// TruncationMarker ends a tool answer that was cut at MaxToolOutput.
const TruncationMarker = "\n[truncated by agentsaga: output exceeded 64 KiB]"

// ToolSpec declares a tool a run may call. A "go" tool names a function
// registered in the worker's Toolbox; an "http" tool is a URL the worker
// calls with the arguments as a JSON body and the idempotency key in the
// Idempotency-Key header; an "mcp" entry is an MCP server whose tools the
// run lists at its start, each called with the key in _meta (mcp.go).
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Kind        string `json:"kind"`
	URL         string `json:"url,omitempty"`
	Method      string `json:"method,omitempty"`
	// Parameters is the JSON schema the arguments must match.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// TimeoutSeconds bounds one attempt; the default is 30.
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Refusal lists the answers that mean "no" although the call
	// succeeded, such as {field: status, equals: declined}. A refusal is
	// never retried.
	Refusal budget.RefusalRules `json:"refusal,omitempty"`
	// Compensate names the tool that undoes this one, with its arguments
	// as a template: {{args.x}} and {{result.x}} are the forward call's
	// argument and result fields, {{key}} its idempotency key.
	Compensate *CompensationSpec `json:"compensate,omitempty"`
	// Irreversible marks a tool whose effect cannot be undone (an email).
	Irreversible bool `json:"irreversible,omitempty"`
	// Headers are sent with every request of an http tool. A value may
	// read the worker's environment, "Bearer ${env:CRM_TOKEN}", when the
	// request is built: only the template is ever stored, and each value
	// read is redacted from the answer and from errors (see headers.go).
	Headers map[string]string `json:"headers,omitempty"`

	// Command starts a stdio MCP server (kind mcp): the program and its
	// arguments, run by the worker, which keeps one process per command
	// and starts it again when it died. URL is the streamable HTTP one.
	Command []string `json:"command,omitempty"`
	// Allow names the server's tools a run may call (kind mcp); empty
	// means all of them. A name the server does not offer fails the run.
	Allow []string `json:"allow,omitempty"`
	// MCPTool is the server's name for the tool. The run's listing sets it
	// (with MCPServer, the entry listed) on each tool it returns; an entry
	// that sets it in the spec names one tool and is not listed.
	MCPTool   string `json:"mcp_tool,omitempty"`
	MCPServer string `json:"mcp_server,omitempty"`
}

// CompensationSpec is a tool's compensating action.
type CompensationSpec struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Validate reports the first thing wrong with the tool, naming the field.
func (t ToolSpec) Validate() error {
	if !toolName.MatchString(t.Name) {
		return fmt.Errorf("tool %q: name must be 1-64 letters, digits, '_' or '-'", t.Name)
	}
	if t.Kind != ToolKindMCP && (t.Command != nil || t.Allow != nil || t.MCPTool != "" || t.MCPServer != "") {
		return fmt.Errorf("tool %s: command, allow, mcp_tool and mcp_server are for kind %q, not %q", t.Name, ToolKindMCP, t.Kind)
	}
	switch t.Kind {
	case ToolKindMCP:
		if err := t.validateMCP(); err != nil {
			return err
		}
	case ToolKindGo, ToolKindAgent:
		if t.URL != "" {
			return fmt.Errorf("tool %s: url is set but kind is %q (want kind %q)", t.Name, t.Kind, ToolKindHTTP)
		}
	case ToolKindHTTP:
		if t.URL == "" {
			return fmt.Errorf("tool %s: an http tool needs a url", t.Name)
		}
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("tool %s: url %q is not an absolute http(s) URL", t.Name, t.URL)
		}
		switch t.Method {
		case "", http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			return fmt.Errorf("tool %s: method %q is not one of GET, POST, PUT, PATCH, DELETE", t.Name, t.Method)
		}
	case "":
		return fmt.Errorf("tool %s: kind is missing (want %q, %q, %q or %q)", t.Name, ToolKindGo, ToolKindHTTP, ToolKindMCP, ToolKindAgent)
	default:
		return fmt.Errorf("tool %s: unknown kind %q (want %q, %q, %q or %q)", t.Name, t.Kind, ToolKindGo, ToolKindHTTP, ToolKindMCP, ToolKindAgent)
	}
	if t.TimeoutSeconds < 0 {
		return fmt.Errorf("tool %s: timeout_seconds %v is negative", t.Name, t.TimeoutSeconds)
	}
	if err := t.validateHeaders(); err != nil {
		return err
	}
	if _, err := t.schema(); err != nil {
		return err
	}
	if _, err := t.refusals(); err != nil {
		return err
	}
	if t.Compensate != nil {
		if t.Irreversible {
			return fmt.Errorf("tool %s: declares both compensate and irreversible", t.Name)
		}
		if t.Compensate.Tool == "" {
			return fmt.Errorf("tool %s: compensate.tool is missing", t.Name)
		}
		var object map[string]any
		if len(t.Compensate.Arguments) > 0 && json.Unmarshal(t.Compensate.Arguments, &object) != nil {
			return fmt.Errorf("tool %s: compensate.arguments must be a JSON object", t.Name)
		}
	}
	return nil
}

var refusalCache sync.Map // tool name + rules -> *budget.RefusalMatcher

// refusals compiles the tool's refusal rules once per worker.
func (t ToolSpec) refusals() (*budget.RefusalMatcher, error) {
	if len(t.Refusal) == 0 {
		return nil, nil
	}
	cacheKey := fmt.Sprintf("%s%+v", t.Name, t.Refusal)
	if cached, ok := refusalCache.Load(cacheKey); ok {
		return cached.(*budget.RefusalMatcher), nil
	}
	matcher, err := t.Refusal.Compile()
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	refusalCache.Store(cacheKey, matcher)
	return matcher, nil
}

// Def is how the tool is described to a model.
func (t ToolSpec) Def() ToolDef {
	return ToolDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters}
}

// Timeout is the longest one attempt may take. A positive timeout_seconds
// stays positive: one past int64 nanoseconds saturates instead of wrapping
// negative, and one under a nanosecond is a nanosecond, not the zero
// timeout Temporal refuses.
func (t ToolSpec) Timeout() time.Duration {
	if t.TimeoutSeconds <= 0 {
		return 30 * time.Second
	}
	if ns := t.TimeoutSeconds * float64(time.Second); ns < math.MaxInt64 {
		return max(time.Duration(ns), 1)
	}
	return math.MaxInt64
}

var schemaCache sync.Map // string(schema) -> *jsonschema.Schema

func (t ToolSpec) schema() (*jsonschema.Schema, error) {
	if len(t.Parameters) == 0 {
		return nil, nil
	}
	if cached, ok := schemaCache.Load(string(t.Parameters)); ok {
		return cached.(*jsonschema.Schema), nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.Parameters))
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters is not JSON: %w", t.Name, err)
	}
	compiler := jsonschema.NewCompiler()
	if err := compiler.AddResource("tool.json", doc); err != nil {
		return nil, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
	}
	compiled, err := compiler.Compile("tool.json")
	if err != nil {
		return nil, fmt.Errorf("tool %s: parameters is not a valid JSON schema: %w", t.Name, err)
	}
	schemaCache.Store(string(t.Parameters), compiled)
	return compiled, nil
}

// CheckArguments reports whether arguments is a JSON object that matches
// the tool's schema, and says what is wrong when it is not.
func (t ToolSpec) CheckArguments(arguments string) error {
	if !json.Valid([]byte(arguments)) {
		return fmt.Errorf("tool %s: arguments are not valid JSON: %s", t.Name, clip(arguments, 200))
	}
	schema, err := t.schema()
	if err != nil || schema == nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(arguments))
	if err != nil {
		return fmt.Errorf("tool %s: arguments: %w", t.Name, err)
	}
	if err := schema.Validate(inst); err != nil {
		return fmt.Errorf("tool %s: arguments do not match its schema: %w", t.Name, err)
	}
	return nil
}

// ToolInvocation is what a tool receives for one attempt.
type ToolInvocation struct {
	// Key is the idempotency key: workflow ID + "/" + activity ID. It is
	// the same on every attempt, so a tool can recognise a duplicate.
	Key       string
	Arguments json.RawMessage
	// Deadline is when the attempt must be finished.
	Deadline time.Time
	// Attempt is Temporal's attempt number, 1 for the first; HTTP tools
	// send it as the Agentsaga-Attempt header so a server can tell a
	// retry from a duplicate delivery.
	Attempt int32
}

// ToolFunc is a tool written in Go. It returns the text the model reads.
// Return an error wrapped by Permanent for a definitive "no" that another
// attempt cannot change; any other error is retried. Either is a failure
// the run is built to meet, logged once at WARN by the retry hook and not
// at ERROR by the SDK (quiet.go); a panic is a bug, and stays ERROR.
type ToolFunc func(ctx context.Context, call ToolInvocation) (string, error)

// Toolbox holds the Go-function tools a worker offers, by name.
type Toolbox struct {
	mu    sync.RWMutex
	funcs map[string]ToolFunc
}

// NewToolbox returns an empty toolbox.
func NewToolbox() *Toolbox { return &Toolbox{funcs: map[string]ToolFunc{}} }

// Register adds or replaces the tool called name.
func (b *Toolbox) Register(name string, fn ToolFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.funcs[name] = reportsFailures(fn)
}

// reportsFailures marks every error fn returns as the tool's own report
// of a failure (toolFailure): expected, so quiet.go keeps it below ERROR.
func reportsFailures(fn ToolFunc) ToolFunc {
	return func(ctx context.Context, call ToolInvocation) (string, error) {
		output, err := fn(ctx, call)
		if err != nil {
			err = reportedFailure(err)
		}
		return output, err
	}
}

// toolFailure is a failure a tool reported: a Go tool's error, an MCP
// tool's isError. It classifies as what it wraps, and a retryable one is
// benign (see transientError): the tool answered, and said it failed.
type toolFailure struct{ err error }

func (e *toolFailure) Error() string { return e.err.Error() }
func (e *toolFailure) Unwrap() error { return e.err }

// reportedFailure marks err as a failure the tool reported.
func reportedFailure(err error) error {
	var reported *toolFailure
	if errors.As(err, &reported) {
		return err
	}
	return &toolFailure{err}
}

// Names lists the registered tools, sorted; a nil Toolbox has none.
func (b *Toolbox) Names() []string {
	if b == nil {
		return nil
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	names := make([]string, 0, len(b.funcs))
	for name := range b.funcs {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func (b *Toolbox) lookup(name string) (ToolFunc, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	fn, ok := b.funcs[name]
	return fn, ok
}

// Merge adds every tool of from to b (a tool of the same name is
// replaced), so that a worker's own tools join the built-in ones.
func (b *Toolbox) Merge(from *Toolbox) {
	if from == nil {
		return
	}
	from.mu.RLock()
	defer from.mu.RUnlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	for name, fn := range from.funcs {
		b.funcs[name] = fn
	}
}

// PermanentError marks a tool failure that no retry can fix.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a failure that must not be retried.
func Permanent(err error) error { return &PermanentError{Err: err} }

// callHTTPTool sends one attempt of an HTTP tool. The body is the arguments
// (for GET, the top-level fields become query parameters). The idempotency
// key and the time left travel as headers, so the far side can deduplicate
// and give up when the caller would. The spec's headers are resolved from
// getenv here, and every value read is redacted from the answer and errors.
func callHTTPTool(ctx context.Context, client *http.Client, tool ToolSpec, call ToolInvocation, getenv func(string) string) (string, error) {
	method := tool.Method
	if method == "" {
		method = http.MethodPost
	}
	headers, redact, err := tool.resolveHeaders(getenv)
	if err != nil {
		return "", err
	}
	target, body := tool.URL, io.Reader(bytes.NewReader(call.Arguments))
	if method == http.MethodGet {
		query, err := queryFromArguments(tool.URL, call.Arguments)
		if err != nil {
			return "", Permanent(fmt.Errorf("tool %s: %w", tool.Name, err))
		}
		target, body = query, nil
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return "", Permanent(fmt.Errorf("tool %s: build request: %w", tool.Name, err))
	}
	for name, values := range headers {
		req.Header[name] = values
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", call.Key)
	if call.Attempt > 0 {
		req.Header.Set("Agentsaga-Attempt", strconv.Itoa(int(call.Attempt)))
	}
	if !call.Deadline.IsZero() {
		// Request-Timeout: whole seconds left before the caller gives up.
		left := math.Max(0, math.Floor(time.Until(call.Deadline).Seconds()))
		req.Header.Set("Request-Timeout", strconv.FormatFloat(left, 'f', 0, 64))
	}
	if len(headers) > 0 {
		client = sameOriginRedirects(client)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", redact.wrap(fmt.Errorf("tool %s: %s %s: %w", tool.Name, method, tool.URL, err))
	}
	defer resp.Body.Close()
	// Read at most one byte over the cap (CallTool cuts and marks it), and
	// with secrets to redact as much again as the longest, so one that
	// straddles the cap is read whole and redacted whole.
	limit := int64(MaxToolOutput + 1 + redact.longest())
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return "", redact.wrap(fmt.Errorf("tool %s: read answer: %w", tool.Name, err))
	}
	text := string(data)
	if redact != nil {
		if int64(len(data)) == limit {
			text = redact.redactCut(text)
		} else {
			text = redact.redact(text)
		}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", NewHTTPError("tool "+tool.Name, resp, []byte(text))
	}
	if redact != nil && len(data) > MaxToolOutput {
		// Redaction may have shortened an answer that was over the cap, so
		// it is cut and marked here, where that is still known.
		text, _ = cutAtRune(cleanText(text), MaxToolOutput)
		text += TruncationMarker
	}
	return text, nil
}

// sameOriginRedirects is client, except that it does not follow a redirect
// to another host or scheme: the headers a tool resolved from the worker's
// environment go only where the spec sends them (net/http would forward
// them, all but Authorization and Cookie, to any host). The 3xx is then the
// tool's answer.
func sameOriginRedirects(client *http.Client) *http.Client {
	guarded := *client
	next := client.CheckRedirect
	guarded.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != via[0].URL.Host || req.URL.Scheme != via[0].URL.Scheme {
			return http.ErrUseLastResponse
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 { // net/http's default policy
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &guarded
}

func queryFromArguments(base string, arguments json.RawMessage) (string, error) {
	var fields map[string]any
	if err := json.Unmarshal(arguments, &fields); err != nil {
		return "", fmt.Errorf("GET arguments must be a JSON object: %w", err)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	q := u.Query()
	for k, v := range fields {
		if s, ok := v.(string); ok {
			q.Set(k, s)
			continue
		}
		encoded, _ := json.Marshal(v)
		q.Set(k, string(encoded))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// cleanOutput makes a tool's answer safe for everywhere it goes: cleaned
// by cleanText, then cut at MaxToolOutput on a character boundary and
// marked. Cleaning comes first because a replacement character is longer
// than the byte it replaces.
func cleanOutput(s string) string {
	s = cleanText(s)
	if body, marked := strings.CutSuffix(s, TruncationMarker); marked && len(body) <= MaxToolOutput {
		// Cut and marked already: an HTTP tool's answer that held a secret
		// is cut after redaction, where it is still known to be over.
		return s
	}
	s, cut := cutAtRune(s, MaxToolOutput)
	if cut {
		s += TruncationMarker
	}
	return s
}

// cleanText replaces what a tool or a model may send but the rest of the
// way cannot carry: invalid UTF-8 (protobuf strings in workflow history and
// Postgres text reject it) and NUL (Postgres text rejects it), each with
// U+FFFD. Both are data, so they are replaced rather than refused.
func cleanText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// clip shortens s to about n bytes for a message, never splitting a UTF-8
// character: a split one is invalid UTF-8 in an error's protobuf string.
func clip(s string, n int) string {
	if s, cut := cutAtRune(s, n); cut {
		return s + "..."
	}
	return s
}

// cutAtRune keeps at most n bytes of s without splitting a UTF-8
// character, and reports whether it cut anything.
func cutAtRune(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}
