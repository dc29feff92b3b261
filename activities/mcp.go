package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/payload"
	"github.com/agentsaga/agentsaga/internal/textclip"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/internal/wire"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/temporal"
)

// mcpImplementation is how the worker introduces itself to MCP servers.
var mcpImplementation = &mcp.Implementation{Name: "agentsaga", Version: "1"}

// mcpEndpoint identifies the server t reaches, for its session.
func mcpEndpoint(t agentsagatype.ToolSpec) string {
	if t.URL != "" {
		return "url " + t.URL
	}
	command, _ := json.Marshal(t.Command)
	return "command " + string(command)
}

// listMCPTools lists the tools of an MCP server entry, once, at the start
// of a run (the workflow freezes the answer in its history): one ToolSpec
// per tool that allow lets through, named <entry>_<tool> (letters, digits,
// '_' and '-', at most 64, as the model APIs require), described with the
// server's readOnlyHint and idempotentHint shown as claims, not trusted,
// and with the tool's inputSchema as its parameters. A name in allow the
// server lacks is an error naming it.
func (a *Activities) listMCPTools(ctx context.Context, server agentsagatype.ToolSpec) ([]agentsagatype.ToolSpec, error) {
	if err := toolcheck.Validate(server); err != nil {
		return nil, temporal.NewNonRetryableApplicationError("mcp: "+err.Error(), wire.ErrTypeMCPTools, nil)
	}
	if !server.IsMCPServer() {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("mcp: tool %s is not an MCP server entry (kind mcp without mcp_tool)", server.Name), wire.ErrTypeMCPTools, nil)
	}
	listed, err := a.fetchMCPTools(ctx, server)
	if err != nil {
		var unusable *mcpListingError
		if errors.As(err, &unusable) {
			return nil, temporal.NewNonRetryableApplicationError(cleanText(err.Error()), wire.ErrTypeMCPTools, nil)
		}
		return nil, toActivityError(err)
	}
	if err := payload.Check("the tool list of MCP server "+server.Name, listed); err != nil {
		return nil, err
	}
	return listed, nil
}

// mcpListingError is a listing the run cannot use.
type mcpListingError struct{ msg string }

func (e *mcpListingError) Error() string { return e.msg }

func (a *Activities) fetchMCPTools(ctx context.Context, server agentsagatype.ToolSpec) ([]agentsagatype.ToolSpec, error) {
	var tools []*mcp.Tool
	err := a.withMCPSession(ctx, server, func(session *mcp.ClientSession) error {
		tools = tools[:0]
		for tool, err := range session.Tools(ctx, nil) {
			if err != nil {
				return err
			}
			tools = append(tools, tool)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mcp: list tools of %s (%s): %w", server.Name, mcpEndpoint(server), err)
	}
	offered := make([]string, len(tools))
	for i, tool := range tools {
		offered[i] = tool.Name
	}
	for _, name := range server.Allow {
		if !slices.Contains(offered, name) {
			return nil, &mcpListingError{fmt.Sprintf("mcp: server %s: allow names %q, which the server does not offer (it offers: %s)",
				server.Name, name, strings.Join(offered, ", "))}
		}
	}
	var out []agentsagatype.ToolSpec
	names := map[string]string{}
	for _, tool := range tools {
		if server.Allow != nil && !slices.Contains(server.Allow, tool.Name) {
			continue
		}
		spec, err := mcpToolSpec(server, tool)
		if err != nil {
			return nil, &mcpListingError{"mcp: " + err.Error()}
		}
		if other, taken := names[spec.Name]; taken {
			return nil, &mcpListingError{fmt.Sprintf("mcp: server %s: tools %q and %q both become %s; allow one of them", server.Name, other, tool.Name, spec.Name)}
		}
		names[spec.Name] = tool.Name
		out = append(out, spec)
	}
	return out, nil
}

// maxMCPDescription bounds a listed tool's description: the model reads it
// on every turn, and a server may send anything.
const maxMCPDescription = 4 << 10

// mcpToolSpec is the ToolSpec of one tool of server.
func mcpToolSpec(server agentsagatype.ToolSpec, tool *mcp.Tool) (agentsagatype.ToolSpec, error) {
	spec := agentsagatype.ToolSpec{
		Name: mcpToolName(server.Name, tool.Name), Kind: agentsagatype.ToolKindMCP,
		URL: server.URL, Command: server.Command, TimeoutSeconds: server.TimeoutSeconds,
		Refusal: server.Refusal, Irreversible: server.Irreversible,
		MCPTool: tool.Name, MCPServer: server.Name,
		// The server's readOnlyHint only makes the watchdog stricter (a
		// read-only call is progress only when its result is new), so it is
		// taken; for a tool the entry declares irreversible it is not.
		ReadOnly: server.ReadOnly || (tool.Annotations != nil && tool.Annotations.ReadOnlyHint && !server.Irreversible),
	}
	description := textclip.Clip(cleanText(strings.TrimSpace(tool.Description)), maxMCPDescription)
	if hints := mcpHints(tool.Annotations); hints != "" {
		description = strings.TrimSpace(description + " (server says: " + hints + "; not trusted)")
	}
	spec.Description = description
	schema := tool.InputSchema
	if schema == nil {
		schema = map[string]any{"type": "object"}
	}
	params, err := json.Marshal(schema)
	if err != nil {
		return agentsagatype.ToolSpec{}, fmt.Errorf("server %s: tool %q: inputSchema does not encode: %w", server.Name, tool.Name, err)
	}
	spec.Parameters = params
	if err := toolcheck.Validate(spec); err != nil {
		return agentsagatype.ToolSpec{}, fmt.Errorf("server %s: tool %q: %w", server.Name, tool.Name, err)
	}
	return spec, nil
}

// mcpHints shows what a server claims of a tool. The claims change how
// nothing is sent: every call goes through the ledger under its key and is
// retried by the same rules, whatever the server says; readOnlyHint only
// tells the watchdog how to judge the tool's calls (mcpToolSpec) (the MCP spec itself
// says clients must not trust annotations from servers they do not trust).
func mcpHints(a *mcp.ToolAnnotations) string {
	if a == nil {
		return ""
	}
	var hints []string
	if a.ReadOnlyHint {
		hints = append(hints, "read-only")
	}
	if a.IdempotentHint {
		hints = append(hints, "idempotent")
	}
	return strings.Join(hints, ", ")
}

var notToolNameChar = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// mcpToolName is the name the model calls a listed tool by:
// <entry>_<tool>, so two servers' tools never collide, with characters the
// model APIs refuse (MCP allows '.' and '/') as '_'. A name over 64 keeps
// its first 55 characters and a digest of the whole, so it stays unique.
func mcpToolName(server, tool string) string {
	name := notToolNameChar.ReplaceAllString(server+"_"+tool, "_")
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	return name[:55] + "_" + hex.EncodeToString(sum[:4])
}

// callMCPTool makes one attempt of a call of an MCP tool, with the
// idempotency key and the attempt in the request's _meta. A transport
// failure (the server died or dropped the connection mid-call, a timeout)
// is retryable, and the next attempt reconnects if the session ended; an
// isError result is classified by mcpToolError; a JSON-RPC error that says
// the request itself is wrong is not retryable.
func (a *Activities) callMCPTool(ctx context.Context, tool agentsagatype.ToolSpec, call ToolInvocation) (string, error) {
	if trimmed := strings.TrimSpace(string(call.Arguments)); !strings.HasPrefix(trimmed, "{") {
		return "", Permanent(fmt.Errorf("tool %s: MCP arguments must be a JSON object, not %s", tool.Name, textclip.Clip(trimmed, 100)))
	}
	params := &mcp.CallToolParams{
		Meta:      mcp.Meta{agentsagatype.MCPMetaIdempotencyKey: call.Key, agentsagatype.MCPMetaAttempt: call.Attempt},
		Name:      tool.MCPTool,
		Arguments: call.Arguments,
	}
	var result *mcp.CallToolResult
	err := a.withMCPSession(ctx, tool, func(session *mcp.ClientSession) (err error) {
		result, err = session.CallTool(ctx, params)
		return err
	})
	if err != nil {
		err = fmt.Errorf("tool %s: mcp call %s on %s: %w", tool.Name, tool.MCPTool, mcpEndpoint(tool), err)
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) && requestIsWrong(rpcErr.Code) {
			return "", Permanent(err)
		}
		return "", err
	}
	output := mcpOutput(result)
	if result.IsError {
		return output, mcpToolError(tool, result, output)
	}
	return output, nil
}

// requestIsWrong says whether a JSON-RPC error code says the request
// itself is wrong, so another attempt would send the same wrong request.
// Other codes (internal errors, a server's own) may pass.
func requestIsWrong(code int64) bool {
	switch code {
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
		return true
	}
	return false
}

// mcpOutput is the text the model reads: the result's text content, other
// content as JSON, or the structured content when there is no content.
func mcpOutput(result *mcp.CallToolResult) string {
	var b strings.Builder
	for _, content := range result.Content {
		if b.Len() > maxToolOutput {
			break // cleanOutput cuts and marks it
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		if text, ok := content.(*mcp.TextContent); ok {
			b.WriteString(text.Text)
			continue
		}
		encoded, _ := json.Marshal(content)
		b.Write(encoded)
	}
	if b.Len() == 0 && result.StructuredContent != nil {
		encoded, _ := json.Marshal(result.StructuredContent)
		b.Write(encoded)
	}
	return b.String()
}

// mcpToolError classifies an isError result like an HTTP answer. MCP has
// no status for a tool's failure, so the rule reads three fields, status,
// retryable and retry_after_seconds:
//
//   - "status", an HTTP status code (100-599): as that status; 408, 409,
//     425, 429 and 5xx are retryable, other 4xx are not (401/403 escalate
//     as a permission error, 404/410 are "nothing there"); "retryable"
//     (true/false) overrides it as x-should-retry does, and
//     "retry_after_seconds" is Retry-After.
//   - no status, "retryable": true: retryable.
//   - otherwise: not retryable. The tool answered, and the model reads
//     what it said; MCP's isError is for errors the model can correct.
//
// The fields are read from the first place that carries a status or a
// retryable, in this order:
//
//  1. the result's structuredContent (a tool registered with
//     Server.AddTool, or mcp.AddTool with output type any);
//  2. the result's _meta, as "agentsaga/status", "agentsaga/retryable"
//     and "agentsaga/retry_after_seconds";
//  3. the result's text: "HTTP 503", "status 503", "status: 503",
//     "status code 503", or a status with its reason phrase as Go's
//     resp.Status writes it, "503 Service Unavailable" (the first 4xx or
//     5xx found); "retryable: true|false" and "retry_after_seconds: N"
//     (":" or "=").
//
// The text is what survives a tool written the go-sdk's usual typed way,
// mcp.AddTool with a concrete output type: the SDK puts a handler's error
// in the text content, and replaces whatever structuredContent the handler
// set with the zero output value, so return
// fmt.Errorf("inventory: %s", resp.Status) and a 503 is retried. A number
// alone is not a status ("item 503 is out of stock").
func mcpToolError(tool agentsagatype.ToolSpec, result *mcp.CallToolResult, output string) error {
	fields := mcpErrorFields(result, output)
	var retryable *bool
	if v, ok := fields["retryable"].(bool); ok {
		retryable = &v
	}
	if status, ok := httpStatus(fields["status"]); ok {
		httpErr := &HTTPError{Op: "tool " + tool.Name + " (MCP isError)", StatusCode: status, ShouldRetry: retryable, Body: truncateBody([]byte(output))}
		if seconds, ok := fields["retry_after_seconds"].(float64); ok && seconds > 0 {
			httpErr.RetryAfter = hintDuration(seconds, time.Second)
		}
		return httpErr
	}
	err := fmt.Errorf("tool %s: MCP isError: %s", tool.Name, truncateBody([]byte(output)))
	if retryable != nil && *retryable {
		return reportedFailure(err) // the tool's own answer: retried, at WARN
	}
	return Permanent(err)
}

// The _meta keys of a result that say how its isError is classified,
// for a tool whose structuredContent cannot say it (mcpToolError).
const (
	mcpMetaStatus            = "agentsaga/status"
	mcpMetaRetryable         = "agentsaga/retryable"
	mcpMetaRetryAfterSeconds = "agentsaga/retry_after_seconds"
)

// mcpErrorFields are the status, retryable and retry_after_seconds of an
// isError result, from the first place that carries a status or a
// retryable (see mcpToolError), with numbers as float64 as JSON decodes
// them. Nil when none does.
func mcpErrorFields(result *mcp.CallToolResult, output string) map[string]any {
	carries := func(fields map[string]any) bool {
		_, status := httpStatus(fields["status"])
		_, retryable := fields["retryable"].(bool)
		return status || retryable
	}
	if result.StructuredContent != nil {
		var fields map[string]any
		encoded, _ := json.Marshal(result.StructuredContent)
		if json.Unmarshal(encoded, &fields) == nil && carries(fields) {
			return fields
		}
	}
	if len(result.Meta) > 0 {
		var meta map[string]any
		encoded, _ := json.Marshal(result.Meta)
		if json.Unmarshal(encoded, &meta) == nil {
			fields := map[string]any{"status": meta[mcpMetaStatus], "retryable": meta[mcpMetaRetryable],
				"retry_after_seconds": meta[mcpMetaRetryAfterSeconds]}
			if carries(fields) {
				return fields
			}
		}
	}
	if fields := textErrorFields(output); carries(fields) {
		return fields
	}
	return nil
}

// httpStatus is v as an HTTP status code, when it is a whole number from
// 100 to 599.
func httpStatus(v any) (int, bool) {
	status, ok := v.(float64)
	if !ok || status != math.Trunc(status) || status < 100 || status > 599 {
		return 0, false
	}
	return int(status), true
}

var (
	// "HTTP 503", "HTTP/1.1 503", "status 503", "status: 503",
	// "status_code=503", "status code 503", `"status": 503`.
	textStatus = regexp.MustCompile(`(?i)\b(?:http(?:/\d(?:\.\d)?)?|status(?:[ _-]?code)?)"?\s*[:=]?\s*([45]\d\d)\b`)
	// A status code followed by a word: "503 Service Unavailable" when the
	// word begins its reason phrase.
	textStatusPhrase = regexp.MustCompile(`\b([45]\d\d) ([A-Za-z][A-Za-z' -]*)`)
	textRetryable    = regexp.MustCompile(`(?i)\bretryable"?\s*[:=]\s*(true|false)\b`)
	textRetryAfter   = regexp.MustCompile(`(?i)\bretry_after_seconds"?\s*[:=]\s*(\d+(?:\.\d+)?)`)
)

// textErrorFields reads the fields from a failed tool's text, as
// mcpToolError documents.
func textErrorFields(text string) map[string]any {
	fields := map[string]any{}
	at := -1
	if m := textStatus.FindStringSubmatchIndex(text); m != nil {
		status, _ := strconv.Atoi(text[m[2]:m[3]])
		fields["status"], at = float64(status), m[0]
	}
	for _, m := range textStatusPhrase.FindAllStringSubmatchIndex(text, -1) {
		if at >= 0 && m[0] > at {
			break
		}
		status, _ := strconv.Atoi(text[m[2]:m[3]])
		if phrase := http.StatusText(status); phrase != "" && strings.HasPrefix(strings.ToLower(text[m[4]:m[5]]), strings.ToLower(phrase)) {
			fields["status"] = float64(status)
			break
		}
	}
	if m := textRetryable.FindStringSubmatch(text); m != nil {
		fields["retryable"] = strings.EqualFold(m[1], "true")
	}
	if m := textRetryAfter.FindStringSubmatch(text); m != nil {
		if seconds, err := strconv.ParseFloat(m[1], 64); err == nil {
			fields["retry_after_seconds"] = seconds
		}
	}
	return fields
}

// mcpSessionSet keeps one MCP client session per server (a URL, or a
// command) for a worker, shared by every call: a stdio server's process is
// started once, and started again when it has died. It is safe for
// concurrent use. The zero value is not usable; see newMCPSessionSet.
type mcpSessionSet struct {
	client     *mcp.Client
	httpClient *http.Client
	mu         sync.Mutex
	sessions   map[string]*mcpSession
	closed     bool
}

// newMCPSessionSet returns an empty set of sessions whose HTTP servers are
// reached with httpClient (nil means http.DefaultClient); it must not
// retry on its own.
func newMCPSessionSet(httpClient *http.Client) *mcpSessionSet {
	return &mcpSessionSet{
		client:     mcp.NewClient(mcpImplementation, &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}),
		httpClient: httpClient,
		sessions:   map[string]*mcpSession{},
	}
}

// CloseSessions ends the MCP sessions a's calls opened, one per server: a
// stdio server has its stdin closed and is stopped if it does not exit.
// Call it once the worker has stopped (agentsaga.Engine.Close does); an
// MCP call after it fails. It is a function, not a method, because every
// exported method of Activities is registered as an activity.
func CloseSessions(a *Activities) error { return a.mcpSessions().close() }

// close ends every session; a stdio server has its stdin closed and is
// stopped if it does not exit.
func (m *mcpSessionSet) close() error {
	m.mu.Lock()
	m.closed = true
	sessions := m.sessions
	m.sessions = map[string]*mcpSession{}
	m.mu.Unlock()
	var errs []error
	for endpoint, s := range sessions {
		<-s.ready
		if s.session != nil {
			if err := s.session.Close(); err != nil {
				errs = append(errs, fmt.Errorf("mcp: close %s: %w", endpoint, err))
			}
		}
	}
	return errors.Join(errs...)
}

// mcpSession is one server's session, or the attempt to open it.
type mcpSession struct {
	ready   chan struct{} // closed once connecting ended, with session or err set
	session *mcp.ClientSession
	err     error
	ended   chan struct{} // closed when the session ended (the server died, the connection broke)
}

func (s *mcpSession) usable() bool {
	select {
	case <-s.ready:
	default:
		return true // still connecting: wait for it
	}
	if s.err != nil {
		return false
	}
	select {
	case <-s.ended:
		return false
	default:
		return true
	}
}

// mcpSessions is the Activities' set of sessions, made on first use; its
// HTTP servers are reached with a.HTTPClient.
func (a *Activities) mcpSessions() *mcpSessionSet {
	a.mcpOnce.Do(func() { a.mcp = newMCPSessionSet(a.HTTPClient) })
	return a.mcp
}

// withMCPSession runs use on the server's session, connecting first when
// there is none or it ended. A session the server has forgotten (an HTTP
// server restarted, or expired it) answers 404 before any tool runs, so
// use runs once more on a new session; any other failure that ended the
// session drops it, and the next call connects again.
func (a *Activities) withMCPSession(ctx context.Context, server agentsagatype.ToolSpec, use func(*mcp.ClientSession) error) error {
	sessions := a.mcpSessions()
	for try := 0; ; try++ {
		s, err := sessions.get(ctx, server)
		if err != nil {
			return err
		}
		err = use(s.session)
		if err == nil {
			return nil
		}
		// A stdio server that exited answers EOF; its session's end may
		// not have been noticed yet, and the next call must not find it.
		if errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) {
			sessions.drop(mcpEndpoint(server), s)
		}
		if !errors.Is(err, mcp.ErrSessionMissing) || try > 0 || ctx.Err() != nil {
			return err
		}
	}
}

// get returns the server's session, connecting when it has none that is
// usable. Only one caller connects; the others wait for it.
func (m *mcpSessionSet) get(ctx context.Context, server agentsagatype.ToolSpec) (*mcpSession, error) {
	endpoint := mcpEndpoint(server)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, errors.New("mcp: the worker's sessions are closed")
	}
	s := m.sessions[endpoint]
	connect := s == nil || !s.usable()
	if connect {
		if s != nil && s.session != nil {
			go s.session.Close() // reaps a stdio server that exited
		}
		s = &mcpSession{ready: make(chan struct{}), ended: make(chan struct{})}
		m.sessions[endpoint] = s
	}
	m.mu.Unlock()
	if connect {
		s.session, s.err = m.connect(ctx, server)
		if s.session != nil {
			go func(session *mcp.ClientSession, ended chan struct{}) {
				_ = session.Wait()
				close(ended)
			}(s.session, s.ended)
		}
		close(s.ready)
	}
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if s.err != nil {
		m.drop(endpoint, s)
		return nil, s.err
	}
	return s, nil
}

// drop forgets s, if it is still the endpoint's session, and closes it.
func (m *mcpSessionSet) drop(endpoint string, s *mcpSession) {
	m.mu.Lock()
	current := m.sessions[endpoint] == s
	if current {
		delete(m.sessions, endpoint)
	}
	m.mu.Unlock()
	if current && s.session != nil {
		// Closing a dead stdio session reaps its process.
		go s.session.Close()
	}
}

func (m *mcpSessionSet) connect(ctx context.Context, server agentsagatype.ToolSpec) (*mcp.ClientSession, error) {
	var transport mcp.Transport
	if server.URL != "" {
		transport = &mcp.StreamableClientTransport{
			Endpoint: server.URL, HTTPClient: m.httpClient,
			// Temporal's retry policy is the one retry loop.
			MaxRetries: -1,
			// Calls need no server-initiated messages, and a standing GET
			// would outlive an HTTP client's timeout and break the session.
			DisableStandaloneSSE: true,
		}
	} else {
		cmd := exec.Command(server.Command[0], server.Command[1:]...)
		cmd.Stderr = os.Stderr // the server's logs go with the worker's
		transport = &mcp.CommandTransport{Command: cmd}
	}
	session, err := m.client.Connect(ctx, transport, nil)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, Permanent(fmt.Errorf("mcp: start %s: %w", mcpEndpoint(server), err))
		}
		return nil, fmt.Errorf("mcp: connect to %s: %w", mcpEndpoint(server), err)
	}
	return session, nil
}
