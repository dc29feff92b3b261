package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/activityid"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/internal/workertest"
	"github.com/agentsaga/agentsaga/workflows"
)

// mcpShop is an MCP server over streamable HTTP, built with the same SDK
// as the worker: it counts its tools/list requests and the idempotency
// keys its charge tool reads from _meta.
type mcpShop struct {
	mu     sync.Mutex
	lists  int
	keys   map[string]int
	server *httptest.Server
}

func newMCPShop(t *testing.T) *mcpShop {
	shop := &mcpShop{keys: map[string]int{}}
	server := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "test"}, nil)
	type chargeArgs struct {
		Amount float64 `json:"amount"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "charge", Description: "Charge an amount."},
		func(_ context.Context, req *mcp.CallToolRequest, in chargeArgs) (*mcp.CallToolResult, any, error) {
			key, _ := req.Params.Meta[agentsagatype.MCPMetaIdempotencyKey].(string)
			shop.mu.Lock()
			shop.keys[key]++
			shop.mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("charged %v", in.Amount)}}}, nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "refund", Description: "Not allowed by the spec."},
		func(context.Context, *mcp.CallToolRequest, chargeArgs) (*mcp.CallToolResult, any, error) {
			panic("refund is not in the spec's allow list")
		})
	server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method == "tools/list" {
				shop.mu.Lock()
				shop.lists++
				shop.mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	shop.server = httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	t.Cleanup(shop.server.Close)
	return shop
}

// A scripted run calls an MCP tool over HTTP on every turn, long enough to
// continue as new: the server's tools are listed once for the whole run
// (one ListMCPTools activity, in the first execution's history), every
// call is an action in the ledger under its key, and the server read that
// key from _meta.
func TestRunCallsAnMCPToolListedOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	shop := newMCPShop(t)
	const turns = 24
	var script strings.Builder
	for i := 1; i <= turns; i++ {
		fmt.Fprintf(&script, "    - tool_calls: [{name: shop_charge, arguments: {amount: %d}}]\n", i)
	}
	spec, err := workflows.ParseSpec(fmt.Appendf(nil, `
goal: charge 24 times
budget: {steps: 100}
history: {max_events: 100}
model:
  provider: scripted
  script:
%s    - content: all charged
tools:
  - {name: shop, kind: mcp, url: %s, allow: [charge], timeout_seconds: 10}
`, script.String(), shop.server.URL))
	require.NoError(t, err)
	spec, err = spec.Resolve()
	require.NoError(t, err)

	queue := "mcp-" + t.Name()
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()
	id := "mcp-run-listed-once"
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)
	firstRun := run.GetRunID() // Get follows the chain to its last execution
	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompleted, result.Status, result.Reason)
	assert.Equal(t, "all charged", result.Answer)

	chain, err := workertest.Executions(ctx, temporalClient, id, firstRun)
	require.NoError(t, err)
	require.Greater(t, len(chain), 1, "the run continued as new")
	var listings []string
	for i, history := range chain {
		for _, event := range history.Events {
			if a := event.GetActivityTaskScheduledEventAttributes(); a != nil && strings.HasSuffix(a.GetActivityType().GetName(), "ListMCPTools") {
				listings = append(listings, fmt.Sprintf("execution %d: %s", i, a.GetActivityId()))
			}
		}
	}
	assert.Equal(t, []string{"execution 0: " + "mcp-tools-shop"}, listings, "one listing, frozen in history")
	shop.mu.Lock()
	assert.Equal(t, 1, shop.lists, "the server was asked for its tools once")
	keys := shop.keys
	shop.mu.Unlock()

	actions, err := ledgerdb.Of(store).ListActions(ctx, id)
	require.NoError(t, err)
	require.Len(t, actions, turns)
	want := map[string]int{}
	for i, action := range actions {
		assert.Equal(t, agentsagatype.ActionCompleted, action.Status, action.Key)
		assert.Equal(t, "shop_charge", action.Tool)
		assert.Equal(t, fmt.Sprintf("charged %d", i+1), action.Result)
		want[action.Key] = 1
	}
	assert.Contains(t, want, id+"/"+activityid.Tool(1, 1, "shop_charge"))
	assert.Equal(t, want, keys, "the server read each call's ledger key from _meta, once")
}
