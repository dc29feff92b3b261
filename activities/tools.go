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
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/textclip"
)

// maxToolOutput is how much of a tool's answer is kept, of every kind of
// tool; the rest is cut and marked, so one chatty tool cannot fill the
// ledger, workflow history (whose payloads are capped at 2 MiB) or the
// model's context.
const maxToolOutput = 64 << 10

// truncationMarker ends a tool answer that was cut at maxToolOutput.
const truncationMarker = "\n[truncated by agentsaga: output exceeded 64 KiB]"

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

// merge adds every tool of from to b (a tool of the same name is
// replaced).
func (b *Toolbox) merge(from *Toolbox) {
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

// permanentError marks a tool failure that no retry can fix.
type permanentError struct{ Err error }

func (e *permanentError) Error() string { return e.Err.Error() }
func (e *permanentError) Unwrap() error { return e.Err }

// Permanent wraps err as a failure that must not be retried.
func Permanent(err error) error { return &permanentError{Err: err} }

// callHTTPTool sends one attempt of an HTTP tool. The body is the arguments
// (for GET, the top-level fields become query parameters). The idempotency
// key and the time left travel as headers, so the far side can deduplicate
// and give up when the caller would. The spec's headers are resolved from
// getenv here, and every value read is redacted from the answer and errors.
func callHTTPTool(ctx context.Context, client *http.Client, tool agentsagatype.ToolSpec, call ToolInvocation, getenv func(string) string) (string, error) {
	method := tool.Method
	if method == "" {
		method = http.MethodPost
	}
	headers, redact, err := resolveHeaders(tool, getenv)
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
	limit := int64(maxToolOutput + 1 + redact.longest())
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
		return "", newHTTPError("tool "+tool.Name, resp, []byte(text))
	}
	if redact != nil && len(data) > maxToolOutput {
		// Redaction may have shortened an answer that was over the cap, so
		// it is cut and marked here, where that is still known.
		text, _ = textclip.CutAtRune(cleanText(text), maxToolOutput)
		text += truncationMarker
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
// by cleanText, then cut at maxToolOutput on a character boundary and
// marked. Cleaning comes first because a replacement character is longer
// than the byte it replaces.
func cleanOutput(s string) string {
	s = cleanText(s)
	if body, marked := strings.CutSuffix(s, truncationMarker); marked && len(body) <= maxToolOutput {
		// Cut and marked already: an HTTP tool's answer that held a secret
		// is cut after redaction, where it is still known to be over.
		return s
	}
	s, cut := textclip.CutAtRune(s, maxToolOutput)
	if cut {
		s += truncationMarker
	}
	return s
}

// cleanText replaces what a tool or a model may send but the rest of the
// way cannot carry: invalid UTF-8 (protobuf strings in workflow history and
// Postgres text reject it) and NUL (Postgres text rejects it), each with
// U+FFFD. Both are data, so they are replaced rather than refused.
func cleanText(s string) string { return textclip.Clean(s) }
