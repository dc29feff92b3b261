package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/workflows"
)

// payments is a payment API: charges and refunds are applied once per
// Idempotency-Key, and it records the order refunds were applied in. The
// first refund request for blockRefundOf hangs until the caller gives up,
// and so does every charge of blockChargeOf, so a test can lose a worker or
// cancel a run in the middle of a call.
type payments struct {
	mu            sync.Mutex
	charges       map[string]string // key -> charge id
	refunds       map[string]string // key -> charge id refunded
	refundOrder   []string          // customers, in the order their refunds were applied
	requests      map[string]int    // key -> requests
	blockRefundOf string
	blockChargeOf string
	blocked       chan struct{}
	closedByPeer  chan struct{}
	release       chan struct{}
}

func newPayments() *payments {
	return &payments{charges: map[string]string{}, refunds: map[string]string{}, requests: map[string]int{},
		blocked: make(chan struct{}, 1), closedByPeer: make(chan struct{}, 1), release: make(chan struct{})}
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	var body struct {
		Customer string `json:"customer"`
		ChargeID string `json:"charge_id"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	p.mu.Lock()
	p.requests[key]++
	hang := false
	switch r.URL.Path {
	case "/charge":
		if _, ok := p.charges[key]; !ok {
			p.charges[key] = fmt.Sprintf("ch_%s", body.Customer)
		}
		hang = body.Customer == p.blockChargeOf
		if !hang {
			fmt.Fprintf(w, `{"id": %q}`, p.charges[key])
		}
	case "/refund":
		if _, ok := p.refunds[key]; !ok {
			p.refunds[key] = body.ChargeID
			p.refundOrder = append(p.refundOrder, body.Customer)
			hang = body.Customer == p.blockRefundOf
		}
		if !hang {
			fmt.Fprintf(w, `{"refunded": %q}`, p.refunds[key])
		}
	}
	p.mu.Unlock()
	if hang {
		select {
		case p.blocked <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
			select {
			case p.closedByPeer <- struct{}{}:
			default:
			}
		case <-p.release:
		}
	}
}

// startPayments serves a payments API configured by configure, releases
// its hanging requests and stops it when the test ends, and returns its URL.
func startPayments(t *testing.T, configure func(*payments)) (*payments, string) {
	pay := newPayments()
	configure(pay)
	server := httptest.NewServer(pay)
	t.Cleanup(server.Close)
	t.Cleanup(func() { close(pay.release) }) // before Close: cleanups run last first
	return pay, server.URL
}

const paymentTools = `
tools:
  - name: charge
    kind: http
    url: %[1]s/charge
    timeout_seconds: 3
    parameters: {type: object, properties: {customer: {type: string}, amount: {type: number}}, required: [customer, amount]}
    compensate:
      tool: refund
      arguments: {charge_id: "{{result.id}}", customer: "{{args.customer}}", amount: "{{args.amount}}"}
  - name: refund
    kind: http
    url: %[1]s/refund
    timeout_seconds: 3
`

// Three customers are charged, the run fails hard on its fourth step, and
// the three refunds run in reverse order, each exactly once, although the
// worker is lost in the middle of the compensation and a second worker
// finishes it.
func TestFailedRunRefundsInReverseAcrossWorkerLoss(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	pay, url := startPayments(t, func(p *payments) { p.blockRefundOf = "bob" })
	queue := "saga-" + t.Name()

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: charge three customers, then do something that fails
budget: {steps: 8}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
    - tool_calls: [{name: charge, arguments: {customer: bob, amount: 20}}]
    - tool_calls: [{name: charge, arguments: {customer: cat, amount: 30}}]
`+paymentTools, url)))
	require.NoError(t, err)

	first := startWorker(ctx, t, store, queue)
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "saga-run", TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)

	select {
	case <-pay.blocked:
	case <-ctx.Done():
		t.Fatal("the compensation never reached bob's refund")
	}
	first.Stop()
	second := startWorker(ctx, t, store, queue)
	defer second.Stop()

	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "model call at step 4 failed")
	require.NotNil(t, result.Saga)
	assert.Equal(t, 3, result.Saga.Compensated)

	pay.mu.Lock()
	defer pay.mu.Unlock()
	assert.Equal(t, []string{"cat", "bob", "ann"}, pay.refundOrder, "refunds in reverse order, each applied once")
	assert.Len(t, pay.charges, 3, "three charges, each applied once")
	assert.Equal(t, map[string]string{
		"saga-run/step-003-call-1-charge/compensate": "ch_cat",
		"saga-run/step-002-call-1-charge/compensate": "ch_bob",
		"saga-run/step-001-call-1-charge/compensate": "ch_ann",
	}, pay.refunds, "each refund under its own key, of the charge its forward call made")
	assert.GreaterOrEqual(t, pay.requests["saga-run/step-002-call-1-charge/compensate"], 2, "bob's refund was retried by the second worker")

	stack, err := ledgerdb.Of(store).CompensationStack(ctx, "saga-run")
	require.NoError(t, err)
	require.Len(t, stack, 3)
	for _, c := range stack {
		assert.Equal(t, agentsagatype.CompensationDone, c.Status, c.ForwardKey)
	}
	stored, err := ledgerdb.Of(store).GetRun(ctx, "saga-run")
	require.NoError(t, err)
	assert.Equal(t, agentsagatype.RunCompensated, stored.Status)
}

// A run cancelled while a tool call is in flight abandons the call (the
// server sees its connection close) and compensates what it had done.
func TestCancelledRunCompensates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := ledgertest.NewHandle(t)
	pay, url := startPayments(t, func(p *payments) { p.blockChargeOf = "bob" })
	queue := "cancel-" + t.Name()

	spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(`
goal: charge two customers
budget: {steps: 8}
model:
  provider: scripted
  script:
    - tool_calls: [{name: charge, arguments: {customer: ann, amount: 10}}]
    - tool_calls: [{name: charge, arguments: {customer: bob, amount: 20}}]
    - content: done
`+paymentTools, url)))
	require.NoError(t, err)
	w := startWorker(ctx, t, store, queue)
	defer w.Stop()
	run, err := temporalClient.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "cancel-run", TaskQueue: queue}, workflows.AgentRun, spec)
	require.NoError(t, err)

	select {
	case <-pay.blocked:
	case <-ctx.Done():
		t.Fatal("bob's charge never reached the server")
	}
	require.NoError(t, temporalClient.CancelWorkflow(ctx, "cancel-run", ""))

	var result workflows.RunResult
	require.NoError(t, run.Get(ctx, &result))
	assert.Equal(t, agentsagatype.RunCompensated, result.Status, result.Reason)
	assert.Contains(t, result.Reason, "cancelled")
	select {
	case <-pay.closedByPeer:
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight charge was not abandoned: the server never saw its connection close")
	}

	pay.mu.Lock()
	defer pay.mu.Unlock()
	// Both charges were registered before they ran, so both are undone:
	// bob's outcome was ambiguous (the call was abandoned mid-flight).
	assert.ElementsMatch(t, []string{"ann", "bob"}, pay.refundOrder)
	assert.Equal(t, "bob", pay.refundOrder[0], "the newest action is undone first")
	stack, err := ledgerdb.Of(store).CompensationStack(ctx, "cancel-run")
	require.NoError(t, err)
	require.Len(t, stack, 2)
	for _, c := range stack {
		assert.Equal(t, agentsagatype.CompensationDone, c.Status, c.ForwardKey)
	}
}
