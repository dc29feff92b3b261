package activities

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/toolcheck"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// The test binary doubles as a stdio MCP server: run as
// `<test binary> mcp-test-server DIR [die]`, it serves testMCPServer on
// stdin/stdout, keeping its effects in DIR so they outlive the process.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "mcp-test-server" {
		fx := &mcpEffects{dir: os.Args[2]}
		fx.append("started", fmt.Sprint(os.Getpid()))
		die := len(os.Args) > 3 && os.Args[3] == "die"
		if err := testMCPServer(fx, die).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// mcpEffects is a test server's side effects, on disk: every execution of
// a tool call (key and attempt, as read from _meta) and every charge
// applied, once per idempotency key, as a payment API deduplicates.
type mcpEffects struct {
	mu  sync.Mutex
	dir string
}

func (fx *mcpEffects) append(file, line string) {
	f, err := os.OpenFile(filepath.Join(fx.dir, file), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		panic(err)
	}
}

func (fx *mcpEffects) lines(file string) []string {
	f, err := os.Open(filepath.Join(fx.dir, file))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		panic(err)
	}
	defer f.Close()
	var lines []string
	for s := bufio.NewScanner(f); s.Scan(); {
		lines = append(lines, s.Text())
	}
	return lines
}

// count is how many lines of file begin with key.
func (fx *mcpEffects) count(file, key string) int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	n := 0
	for _, line := range fx.lines(file) {
		if line == key || strings.HasPrefix(line, key+" ") {
			n++
		}
	}
	return n
}

// execute records one execution under key and applies the charge unless
// the key was applied before; it returns how many times key executed.
func (fx *mcpEffects) execute(key string, attempt any) int {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.append("executions", fmt.Sprintf("%s %v", key, attempt))
	executions, applied := 0, false
	for _, line := range fx.lines("executions") {
		if strings.HasPrefix(line, key+" ") {
			executions++
		}
	}
	for _, line := range fx.lines("applied") {
		applied = applied || line == key
	}
	if !applied {
		fx.append("applied", key)
	}
	return executions
}

// testMCPServer is a shop: charge (deduplicated by the idempotency key in
// _meta), order.status (annotated read-only and idempotent), and fail,
// which answers isError with the structuredContent it is given. With die,
// the process exits in the middle of a key's first charge, after applying
// it and before answering.
func testMCPServer(fx *mcpEffects, die bool) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "test"}, nil)
	type chargeArgs struct {
		Amount float64 `json:"amount"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "charge", Description: "Charge an amount."},
		func(_ context.Context, req *mcp.CallToolRequest, in chargeArgs) (*mcp.CallToolResult, any, error) {
			key, _ := req.Params.Meta[agentsagatype.MCPMetaIdempotencyKey].(string)
			if key == "" {
				return nil, nil, errors.New("no idempotency key in _meta")
			}
			if fx.execute(key, req.Params.Meta[agentsagatype.MCPMetaAttempt]) == 1 && die {
				os.Exit(3)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("charged %v under %s", in.Amount, key)}}}, nil, nil
		})
	type statusArgs struct {
		ID string `json:"id"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "order.status", Description: "Look an order up.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in statusArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "order " + in.ID + " shipped"}}}, nil, nil
		})
	// reserve is written the go-sdk's usual typed way, with a concrete
	// output type: the SDK replaces a result's structuredContent with the
	// zero output value, and puts a handler's error in the text content.
	type reserveArgs struct {
		Fail string `json:"fail"`
	}
	type reservation struct {
		ID string `json:"id"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "reserve", Description: "Reserve stock."},
		func(_ context.Context, _ *mcp.CallToolRequest, in reserveArgs) (*mcp.CallToolResult, reservation, error) {
			switch in.Fail {
			case "":
				return nil, reservation{ID: "R-1"}, nil
			case "structured":
				// Lost on the wire: the SDK sends {"id":""} instead.
				return &mcp.CallToolResult{IsError: true, StructuredContent: map[string]any{"status": 503}}, reservation{}, nil
			case "meta":
				return &mcp.CallToolResult{IsError: true, Meta: mcp.Meta{"agentsaga/status": 503, "agentsaga/retry_after_seconds": 2},
					Content: []mcp.Content{&mcp.TextContent{Text: "inventory is down"}}}, reservation{}, nil
			}
			return nil, reservation{}, errors.New(in.Fail)
		})
	server.AddTool(&mcp.Tool{Name: "fail", Description: "Fail as told.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"structured":{"type":"object"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct {
				Structured map[string]any `json:"structured"`
			}
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			result := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the shop failed"}}}
			if in.Structured != nil {
				result.StructuredContent = in.Structured
			}
			return result, nil
		})
	return server
}

// dropper passes MCP requests through, except that it drops the connection
// of the next `drops` tool calls once the call has run, before its answer
// leaves: the worst moment, the effect done and the client none the wiser.
type dropper struct {
	next  http.Handler
	drops atomic.Int32
}

func (d *dropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if bytes.Contains(body, []byte(`"tools/call"`)) && d.drops.Add(-1) >= 0 {
		w = &droppingWriter{ResponseWriter: w}
	}
	d.next.ServeHTTP(w, r)
}

type droppingWriter struct {
	http.ResponseWriter
	dropped bool
}

func (w *droppingWriter) WriteHeader(int) {}
func (w *droppingWriter) Flush()          {}
func (w *droppingWriter) Write([]byte) (int, error) {
	if !w.dropped {
		w.dropped = true
		if conn, _, err := w.ResponseWriter.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}
	return 0, errors.New("dropped")
}

// httpMCP serves testMCPServer over streamable HTTP.
func httpMCP(t *testing.T) (url string, fx *mcpEffects, drop *dropper) {
	t.Helper()
	fx = &mcpEffects{dir: t.TempDir()}
	server := testMCPServer(fx, false)
	drop = &dropper{next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)}
	ts := httptest.NewServer(drop)
	t.Cleanup(ts.Close)
	return ts.URL, fx, drop
}

// stdioMCP is a server entry that starts the test binary as a stdio server.
func stdioMCP(t *testing.T, die bool) (command []string, fx *mcpEffects) {
	t.Helper()
	fx = &mcpEffects{dir: t.TempDir()}
	command = []string{os.Args[0], "mcp-test-server", fx.dir}
	if die {
		command = append(command, "die")
	}
	return command, fx
}

func mcpActivities(t *testing.T) *Activities {
	t.Helper()
	acts := &Activities{Ledger: ledgertest.NewStore(t)}
	t.Cleanup(func() { _ = CloseSessions(acts) })
	return acts
}

func mcpEnv(acts *Activities) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	Register(env, acts, true)
	return env
}

func listMCP(t *testing.T, acts *Activities, server agentsagatype.ToolSpec) ([]agentsagatype.ToolSpec, error) {
	t.Helper()
	val, err := mcpEnv(acts).ExecuteActivity(acts.ListMCPTools, server)
	if err != nil {
		return nil, err
	}
	var tools []agentsagatype.ToolSpec
	require.NoError(t, val.Get(&tools))
	return tools, nil
}

func callMCP(t *testing.T, acts *Activities, tool agentsagatype.ToolSpec, arguments string) (wire.ToolResult, error) {
	t.Helper()
	val, err := mcpEnv(acts).ExecuteActivity(acts.CallTool, wire.ToolCallRequest{Tool: tool, Arguments: arguments})
	if err != nil {
		return wire.ToolResult{}, err
	}
	var result wire.ToolResult
	require.NoError(t, val.Get(&result))
	return result, nil
}

func toolNamed(t *testing.T, tools []agentsagatype.ToolSpec, name string) agentsagatype.ToolSpec {
	t.Helper()
	for _, tool := range tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s among %+v", name, tools)
	return agentsagatype.ToolSpec{}
}

func TestListMCPToolsFiltersByAllowAndShowsAnnotations(t *testing.T) {
	t.Parallel()
	url, _, _ := httpMCP(t)
	acts := mcpActivities(t)
	server := agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, URL: url, TimeoutSeconds: 5}

	tools, err := listMCP(t, acts, server)
	require.NoError(t, err)
	names := []string{}
	for _, tool := range tools {
		names = append(names, tool.Name)
		assert.Equal(t, agentsagatype.ToolKindMCP, tool.Kind)
		assert.Equal(t, "shop", tool.MCPServer)
		assert.Equal(t, url, tool.URL, "the call goes to the server that was listed")
		assert.EqualValues(t, 5, tool.TimeoutSeconds)
		assert.NoError(t, toolcheck.Validate(tool))
	}
	assert.ElementsMatch(t, []string{"shop_charge", "shop_order_status", "shop_reserve", "shop_fail"}, names)

	status := toolNamed(t, tools, "shop_order_status")
	assert.Equal(t, "order.status", status.MCPTool, "the model's name is sanitized; the call uses the server's")
	assert.Equal(t, "Look an order up. (server says: read-only, idempotent; not trusted)", status.Description)
	charge := toolNamed(t, tools, "shop_charge")
	assert.Equal(t, "Charge an amount.", charge.Description, "no annotations, no claims")
	assert.Contains(t, string(charge.Parameters), `"amount"`, "the inputSchema is the parameters")
	assert.Error(t, toolcheck.CheckArguments(charge, `{"amount": "five"}`), "the schema is enforced before the call")

	tools, err = listMCP(t, acts, agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, URL: url, Allow: []string{"charge"}})
	require.NoError(t, err)
	require.Len(t, tools, 1)
	assert.Equal(t, "shop_charge", tools[0].Name)

	_, err = listMCP(t, acts, agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, URL: url, Allow: []string{"charge", "refund"}})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.True(t, appErr.NonRetryable())
	assert.Equal(t, wire.ErrTypeMCPTools, appErr.Type())
	assert.Contains(t, appErr.Message(), `allow names "refund", which the server does not offer`)
}

// On both transports, a call carries its idempotency key in _meta, goes
// through the ledger under that key, and a second delivery of the key is
// answered from the ledger without reaching the server.
func TestMCPCallSendsTheKeyInMetaOnBothTransports(t *testing.T) {
	t.Parallel()
	url, httpFx, _ := httpMCP(t)
	command, stdioFx := stdioMCP(t, false)
	for name, c := range map[string]struct {
		server agentsagatype.ToolSpec
		fx     *mcpEffects
	}{
		"http":  {agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, URL: url}, httpFx},
		"stdio": {agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, Command: command}, stdioFx},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			acts := mcpActivities(t)
			tools, err := listMCP(t, acts, c.server)
			require.NoError(t, err)
			charge := toolNamed(t, tools, "shop_charge")
			for i := range 2 {
				result, err := callMCP(t, acts, charge, `{"amount": 5}`)
				require.NoError(t, err)
				assert.Equal(t, i == 1, result.Replayed)
				assert.Contains(t, result.Output, "charged 5 under default-test-workflow-id/")
			}
			actions, err := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
			require.NoError(t, err)
			require.Len(t, actions, 1)
			assert.Equal(t, "completed", actions[0].Status)
			assert.Equal(t, "shop_charge", actions[0].Tool)
			assert.Equal(t, []string{actions[0].Key + " 1"}, c.fx.lines("executions"),
				"the server read the ledger's key and the attempt from _meta, once")
			if name == "stdio" {
				assert.Len(t, c.fx.lines("started"), 1, "listing and calls share one process")
			}
		})
	}
}

func TestMCPIsErrorIsClassifiedLikeAnHTTPStatus(t *testing.T) {
	t.Parallel()
	url, _, _ := httpMCP(t)
	for name, c := range map[string]struct {
		structured string
		retryable  bool
		errType    string
	}{
		"503 is retryable":           {`{"status": 503}`, true, wire.ErrTypeHTTP},
		"400 is not":                 {`{"status": 400}`, false, wire.ErrTypeHTTP},
		"403 is a permission error":  {`{"status": 403}`, false, wire.ErrTypePermission},
		"no status is not retryable": {`{}`, false, wire.ErrTypeRejected},
		"retryable without a status": {`{"retryable": true}`, true, wire.ErrTypeTransient},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			acts := mcpActivities(t)
			tools, err := listMCP(t, acts, agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, URL: url, Allow: []string{"fail"}})
			require.NoError(t, err)
			_, err = callMCP(t, acts, tools[0], `{"structured": `+c.structured+`}`)
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			assert.Equal(t, c.retryable, !appErr.NonRetryable())
			assert.Equal(t, c.errType, appErr.Type())
			assert.Contains(t, appErr.Message(), "the shop failed", "the model reads what the tool said")
			actions, err := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
			require.NoError(t, err)
			require.Len(t, actions, 1)
			want := map[bool]string{true: "failed", false: "rejected"}[c.retryable]
			assert.Equal(t, want, actions[0].Status)
		})
	}
}

// A tool written the go-sdk's usual typed way (mcp.AddTool with a concrete
// output type) keeps its error: the SDK puts a handler's error in the text
// content and replaces structuredContent with the zero output value, so the
// status and the retryability are read from the text, or from the result's
// _meta, when structuredContent carries neither. Before, every such error
// was a non-retryable Rejected, a 503 included.
func TestMCPTypedToolErrorKeepsItsStatus(t *testing.T) {
	t.Parallel()
	url, _, _ := httpMCP(t)
	for name, c := range map[string]struct {
		fail       string
		retryable  bool
		errType    string
		status     int
		retryAfter time.Duration
		says       string
	}{
		"resp.Status of a 503":       {"inventory: 503 Service Unavailable", true, wire.ErrTypeHTTP, 503, 0, "inventory: 503 Service Unavailable"},
		"HTTP 503":                   {"inventory answered HTTP 503", true, wire.ErrTypeHTTP, 503, 0, "inventory answered HTTP 503"},
		"status 429 with its wait":   {"status 429: slow down, retry_after_seconds: 3", true, wire.ErrTypeHTTP, 429, 3 * time.Second, "slow down"},
		"retryable without a status": {"inventory is warming up (retryable: true)", true, wire.ErrTypeTransient, 0, 0, "warming up"},
		"a 503 that says no retry":   {"status: 503, retryable: false", false, wire.ErrTypeHTTP, 503, 0, "status: 503"},
		"HTTP 400":                   {"HTTP 400: quantity must be positive", false, wire.ErrTypeHTTP, 400, 0, "quantity must be positive"},
		"HTTP 403":                   {"HTTP 403: not your warehouse", false, wire.ErrTypePermission, 403, 0, "not your warehouse"},
		"no status":                  {"no such item", false, wire.ErrTypeRejected, 0, 0, "no such item"},
		"a number is not a status":   {"item 503 is out of stock", false, wire.ErrTypeRejected, 0, 0, "item 503 is out of stock"},
		"_meta":                      {"meta", true, wire.ErrTypeHTTP, 503, 2 * time.Second, "inventory is down"},
		// What the SDK does not send cannot be read: the zero output value
		// replaced it. The tool's error is a Rejected, as documented.
		"structuredContent, lost": {"structured", false, wire.ErrTypeRejected, 0, 0, `{"id":""}`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			acts := mcpActivities(t)
			tools, err := listMCP(t, acts, agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, URL: url, Allow: []string{"reserve"}})
			require.NoError(t, err)
			arguments, _ := json.Marshal(map[string]string{"fail": c.fail})
			_, err = callMCP(t, acts, tools[0], string(arguments))
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, err, &appErr)
			assert.Equal(t, c.retryable, !appErr.NonRetryable(), appErr.Error())
			assert.Equal(t, c.errType, appErr.Type())
			assert.Equal(t, c.retryAfter, appErr.NextRetryDelay())
			assert.Contains(t, appErr.Message(), c.says, "the model reads what the tool said")
			assert.Equal(t, temporal.ApplicationErrorCategoryBenign, appErr.Category(),
				"the tool answered: a failure the run is built to meet, not an ERROR")
			var status int
			if c.status != 0 {
				require.NoError(t, appErr.Details(&status))
			}
			assert.Equal(t, c.status, status)
		})
	}
}

// The rule in full, on results as the SDK decodes them.
func TestMCPToolErrorRule(t *testing.T) {
	t.Parallel()
	tool := agentsagatype.ToolSpec{Name: "shop_fail"}
	for name, c := range map[string]struct {
		structured any
		retryable  bool
		status     int
		retryAfter time.Duration
		output     string // the text; "nope" when empty
		meta       mcp.Meta
	}{
		"408":                      {map[string]any{"status": 408.0}, true, 408, 0, "", nil},
		"429 with retry_after":     {map[string]any{"status": 429.0, "retry_after_seconds": 7.0}, true, 429, 7 * time.Second, "", nil},
		"500":                      {map[string]any{"status": 500.0}, true, 500, 0, "", nil},
		"404":                      {map[string]any{"status": 404.0}, false, 404, 0, "", nil},
		"503 retryable false":      {map[string]any{"status": 503.0, "retryable": false}, false, 503, 0, "", nil},
		"409 retryable true":       {map[string]any{"status": 409.0, "retryable": true}, true, 409, 0, "", nil},
		"status out of range":      {map[string]any{"status": 42.0}, false, 0, 0, "", nil},
		"status not a number":      {map[string]any{"status": "503"}, false, 0, 0, "", nil},
		"fractional status":        {map[string]any{"status": 503.5}, false, 0, 0, "", nil},
		"structured is not object": {[]any{1.0}, false, 0, 0, "", nil},
		"nothing":                  {nil, false, 0, 0, "", nil},
		// A typed tool's structuredContent is its zero output value: the
		// text and _meta say what it does not.
		"zero output, text status":   {map[string]any{"id": ""}, true, 503, 0, "upstream: 503 Service Unavailable", nil},
		"zero output, _meta":         {map[string]any{"id": ""}, true, 429, 4 * time.Second, "slow down", mcp.Meta{"agentsaga/status": 429.0, "agentsaga/retry_after_seconds": 4.0}},
		"_meta before text":          {nil, false, 400, 0, "HTTP 503", mcp.Meta{"agentsaga/status": 400.0}},
		"structured before text":     {map[string]any{"status": 404.0}, false, 404, 0, "HTTP 503", nil},
		"_meta retryable false":      {nil, false, 0, 0, "HTTP 503", mcp.Meta{"agentsaga/retryable": false}}, // the first place that says, says it all
		"a status with no number":    {nil, false, 0, 0, "status unknown; retry later", nil},
		"a 2xx is no failure status": {nil, false, 0, 0, "upstream answered status 200 with no body; HTTP 302 Found", nil},
		"a phrase that is not one":   {nil, false, 0, 0, "500 Internal widgets failed", nil},
		"JSON text":                  {nil, true, 502, 0, `{"status": 502, "error": "bad gateway"}`, nil},
		"status code":                {nil, true, 504, 0, "the call failed with status code 504", nil},
		"retry_after without status": {nil, true, 0, 0, "retryable=true retry_after_seconds=9", nil},
	} {
		output := c.output
		if output == "" {
			output = "nope"
		}
		err := toActivityError(mcpToolError(tool, &mcp.CallToolResult{IsError: true, StructuredContent: c.structured, Meta: c.meta}, output))
		var appErr *temporal.ApplicationError
		require.ErrorAs(t, err, &appErr, name)
		assert.Equal(t, c.retryable, !appErr.NonRetryable(), name)
		assert.Equal(t, c.retryAfter, appErr.NextRetryDelay(), name)
		var status int
		if c.status != 0 {
			require.NoError(t, appErr.Details(&status), name)
		}
		assert.Equal(t, c.status, status, name)
	}
}

// A stdio server exits in the middle of a call, after its effect: the
// attempt fails retryably, the next attempt (same key) starts the server
// again, and the server, deduplicating by the key, applies it once.
func TestMCPStdioServerDiesMidCall(t *testing.T) {
	t.Parallel()
	command, fx := stdioMCP(t, true)
	acts := mcpActivities(t)
	tools, err := listMCP(t, acts, agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, Command: command, TimeoutSeconds: 10})
	require.NoError(t, err)
	charge := toolNamed(t, tools, "shop_charge")

	_, err = callMCP(t, acts, charge, `{"amount": 5}`)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.False(t, appErr.NonRetryable(), "a server that died is retryable: %v", err)

	result, err := callMCP(t, acts, charge, `{"amount": 5}`)
	require.NoError(t, err)
	assert.Contains(t, result.Output, "charged 5 under ")

	actions, err := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, actions, 1)
	key := actions[0].Key
	assert.Equal(t, "completed", actions[0].Status)
	assert.Equal(t, 2, actions[0].Attempts)
	assert.Equal(t, 2, fx.count("executions", key), "both attempts reached the server")
	assert.Equal(t, 1, fx.count("applied", key), "the effect happened once")
	assert.Len(t, fx.lines("started"), 2, "the dead server was started again")
}

// An HTTP server drops the connection after the tool ran: the attempt
// fails retryably, and the retry under the same key is deduplicated.
func TestMCPHTTPServerDropsTheConnection(t *testing.T) {
	t.Parallel()
	url, fx, drop := httpMCP(t)
	acts := mcpActivities(t)
	tools, err := listMCP(t, acts, agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, URL: url, TimeoutSeconds: 10})
	require.NoError(t, err)
	charge := toolNamed(t, tools, "shop_charge")

	drop.drops.Store(1)
	_, err = callMCP(t, acts, charge, `{"amount": 5}`)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.False(t, appErr.NonRetryable(), "a dropped connection is retryable: %v", err)

	result, err := callMCP(t, acts, charge, `{"amount": 5}`)
	require.NoError(t, err)
	assert.Contains(t, result.Output, "charged 5 under ")
	actions, err := acts.Ledger.ListActions(context.Background(), "default-test-workflow-id")
	require.NoError(t, err)
	require.Len(t, actions, 1)
	key := actions[0].Key
	assert.Equal(t, 2, fx.count("executions", key), "the dropped call had run")
	assert.Equal(t, 1, fx.count("applied", key), "the effect happened once")
}

// Many calls at once share one session per server: one stdio process, and
// every key applied once. Run with -race.
func TestMCPSessionsAreSharedUnderConcurrentCalls(t *testing.T) {
	t.Parallel()
	url, httpFx, _ := httpMCP(t)
	command, stdioFx := stdioMCP(t, false)
	acts := mcpActivities(t)
	for name, c := range map[string]struct {
		server agentsagatype.ToolSpec
		fx     *mcpEffects
	}{
		"http":  {agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, URL: url, TimeoutSeconds: 10}, httpFx},
		"stdio": {agentsagatype.ToolSpec{Name: "shop", Kind: agentsagatype.ToolKindMCP, Command: command, TimeoutSeconds: 10}, stdioFx},
	} {
		charge := c.server
		charge.Name, charge.MCPTool, charge.MCPServer = "shop_charge", "charge", "shop"
		const calls = 16
		outputs := make([]string, calls)
		errs := make([]error, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				outputs[i], errs[i] = acts.callMCPTool(ctx, charge, ToolInvocation{
					Key: fmt.Sprintf("wf/%s-%d", name, i), Arguments: json.RawMessage(`{"amount": 1}`), Attempt: 1})
			})
		}
		wg.Wait()
		for i := range calls {
			require.NoError(t, errs[i], "%s call %d", name, i)
			assert.Equal(t, fmt.Sprintf("charged 1 under wf/%s-%d", name, i), outputs[i])
			assert.Equal(t, 1, c.fx.count("applied", fmt.Sprintf("wf/%s-%d", name, i)))
		}
		if name == "stdio" {
			assert.Len(t, c.fx.lines("started"), 1, "one process for every call")
		}
	}
	sessions := acts.mcpSessions()
	sessions.mu.Lock()
	assert.Len(t, sessions.sessions, 2, "one session per server")
	sessions.mu.Unlock()
}

func TestMCPToolNames(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "shop_order_status", mcpToolName("shop", "order.status"))
	assert.Equal(t, "fs_read_file", mcpToolName("fs", "read/file"))
	long := mcpToolName("shop", strings.Repeat("x", 100))
	assert.Len(t, long, 64)
	assert.Regexp(t, `^[a-zA-Z0-9_-]{1,64}$`, long)
	assert.NotEqual(t, long, mcpToolName("shop", strings.Repeat("x", 101)), "cut names stay distinct")
}

func TestMCPSpecValidation(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		tool agentsagatype.ToolSpec
		want string
	}{
		"both":                {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", Command: []string{"srv"}}, "tool s: an mcp tool takes url (streamable HTTP) or command (stdio), not both"},
		"neither":             {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP}, "tool s: an mcp tool needs url (streamable HTTP) or command"},
		"relative url":        {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "/mcp"}, `tool s: url "/mcp" is not an absolute http(s) URL`},
		"ws url":              {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "ws://a/mcp"}, `tool s: url "ws://a/mcp" is not an absolute http(s) URL`},
		"empty command":       {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, Command: []string{}}, "tool s: command is empty"},
		"empty program":       {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, Command: []string{"", "x"}}, "tool s: command[0], the program, is empty"},
		"method":              {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", Method: "GET"}, "tool s: method is for kind http"},
		"parameters":          {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", Parameters: json.RawMessage(`{}`)}, "tool s: parameters come from the MCP server's inputSchema"},
		"compensate":          {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", Compensate: &agentsagatype.CompensationSpec{Tool: "r"}}, "tool s: compensate cannot apply to every tool"},
		"empty allow":         {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", Allow: []string{}}, "tool s: allow is empty"},
		"empty allowed name":  {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", Allow: []string{"a", ""}}, "tool s: allow[1] is empty"},
		"allow twice":         {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", Allow: []string{"a", "a"}}, `tool s: allow names "a" twice`},
		"allow with mcp_tool": {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", MCPTool: "a", Allow: []string{"a"}}, "tool s: allow is for a server entry"},
		"server alone":        {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", MCPServer: "x"}, "tool s: mcp_server is set without mcp_tool"},
		"command on http":     {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindHTTP, URL: "http://a/", Command: []string{"x"}}, `tool s: command, allow, mcp_tool and mcp_server are for kind "mcp", not "http"`},
		"allow on go":         {agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindGo, Allow: []string{"x"}}, `are for kind "mcp", not "go"`},
		"bad name":            {agentsagatype.ToolSpec{Name: "a.b", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp"}, `tool "a.b": name must be`},
	} {
		err := toolcheck.Validate(c.tool)
		if assert.Error(t, err, name) {
			assert.Contains(t, err.Error(), c.want, name)
		}
	}
	for name, tool := range map[string]agentsagatype.ToolSpec{
		"http server":  {Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "https://a.example/mcp", Allow: []string{"x"}, TimeoutSeconds: 5},
		"stdio server": {Name: "s", Kind: agentsagatype.ToolKindMCP, Command: []string{"srv", "--stdio"}},
		"one tool":     {Name: "s_x", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp", MCPTool: "x", MCPServer: "s", Parameters: json.RawMessage(`{"type":"object"}`)},
	} {
		assert.NoError(t, toolcheck.Validate(tool), name)
	}
	_, err := (&Activities{}).toolRunner(agentsagatype.ToolSpec{Name: "s", Kind: agentsagatype.ToolKindMCP, URL: "http://a/mcp"})
	assert.ErrorContains(t, err, "an MCP server entry is listed at the run's start")
}
