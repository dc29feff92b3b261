package workflows_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/workflows"
)

// An MCP server that cannot be listed fails the run before its first
// model turn, with a reason naming the server, recorded in the ledger.
func TestMCPListingFailureFailsTheRunAtStart(t *testing.T) {
	t.Parallel()
	spec := mustSpec(t, `
goal: charge
budget: {steps: 3}
model: {provider: scripted, script: [{content: never asked}]}
tools:
  - {name: shop, kind: mcp, url: "http://127.0.0.1:1/mcp"}
`)
	_, err, store := runAgent(t, spec)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	assert.Equal(t, workflows.ErrTypeRunFailed, appErr.Type())
	assert.Contains(t, appErr.Message(), "MCP server shop: could not list its tools")
	run, err := store.GetRun(context.Background(), workflowID)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunFailed, run.Status)
	assert.Contains(t, run.Reason, "MCP server shop")
	assert.Zero(t, run.StepsUsed, "no model turn was made")
}

// A sub-agent that names an MCP server entry gets the tools the parent
// listed, and does not list them again.
func TestSubAgentGetsTheListedToolsOfAnMCPServer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	lists, keys := 0, []string{}
	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "test"}, nil)
	type chargeArgs struct {
		Amount float64 `json:"amount"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "charge"}, func(_ context.Context, req *mcp.CallToolRequest, in chargeArgs) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, fmt.Sprint(req.Params.Meta[agentsagatype.MCPMetaIdempotencyKey]))
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("charged %v", in.Amount)}}}, nil, nil
	})
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				mu.Lock()
				lists++
				mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer ts.Close()

	spec := mustSpec(t, fmt.Sprintf(`
goal: have the helper charge
budget: {steps: 10}
model:
  provider: scripted
  script:
    - tool_calls: [{name: helper, arguments: {task: charge 1}}]
    - content: done
agents:
  helper:
    tools: [shop]
    model:
      provider: scripted
      script:
        - tool_calls: [{name: shop_charge, arguments: {amount: 1}}]
        - content: charged
tools:
  - {name: helper, kind: agent, parameters: {type: object, properties: {task: {type: string}}, required: [task]}}
  - {name: shop, kind: mcp, url: %s}
`, ts.URL))
	result, err, store := runAgent(t, spec)
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompleted, result.Status)
	assert.Equal(t, "done", result.Answer)

	child := workflowID + "/" + activityid.Tool(1, 1, "helper")
	actions, err := store.ListActions(context.Background(), child)
	require.NoError(t, err)
	require.Len(t, actions, 1)
	assert.Equal(t, "charged 1", actions[0].Result)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{actions[0].Key}, keys, "the sub-agent's call carried its own key")
	assert.Equal(t, 1, lists, "the parent listed the server; the sub-agent did not")
}

// The client validates MCP entries like any tool, naming the field.
func TestParseSpecValidatesMCPTools(t *testing.T) {
	t.Parallel()
	head := "goal: g\nbudget: {steps: 2}\nmodel: {provider: scripted, script: [{content: hi}]}\n"
	spec, err := workflows.ParseSpec([]byte(head + `tools:
  - {name: shop, kind: mcp, url: "https://shop.example/mcp", allow: [charge], timeout_seconds: 5}
  - {name: fs, kind: mcp, command: [mcp-server-filesystem, /srv]}
`))
	require.NoError(t, err)
	require.Len(t, spec.Tools, 2)
	assert.Equal(t, []string{"mcp-server-filesystem", "/srv"}, spec.Tools[1].Command)
	_, err = spec.Resolve()
	require.NoError(t, err)

	for yaml, want := range map[string]string{
		`tools: [{name: shop, kind: mcp, url: "http://a/mcp", command: [srv]}]`: "tools[0]: tool shop: an mcp tool takes url (streamable HTTP) or command (stdio), not both",
		`tools: [{name: shop, kind: mcp}]`:                                      "tools[0]: tool shop: an mcp tool needs url",
		`tools: [{name: shop, kind: mcp, url: "shop.example/mcp"}]`:             `tools[0]: tool shop: url "shop.example/mcp" is not an absolute http(s) URL`,
		`tools: [{name: shop, kind: mcp, command: []}]`:                         "tools[0]: tool shop: command is empty",
		`tools: [{name: shop, kind: http, url: "http://a/", allow: [x]}]`:       `tools[0]: tool shop: command, allow, mcp_tool and mcp_server are for kind "mcp"`,
	} {
		_, err := workflows.ParseSpec([]byte(head + yaml))
		if assert.Error(t, err, yaml) {
			assert.Contains(t, err.Error(), want, yaml)
		}
	}
}
