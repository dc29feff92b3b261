package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga/workflows"
)

func demoCommand() *cobra.Command {
	var temporalBin string
	var exit bool
	cmd := &cobra.Command{
		Use:   "demo [--exit]",
		Short: "dev, plus one scripted run against loopback HTTP tools (one of them flaky)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			stack, err := startDevStack(ctx, out, temporalBin)
			if err != nil {
				return err
			}
			defer stack.Close()

			desk := newRefundDesk()
			listener, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return fmt.Errorf("demo: listen on loopback: %w", err)
			}
			server := &http.Server{Handler: desk}
			go func() { _ = server.Serve(listener) }()
			defer server.Close()
			base := "http://" + listener.Addr().String()
			fmt.Fprintf(out, "demo tools: refund desk at %s (lookup_order fails its first attempt with 503)\n\n", base)

			spec, err := workflows.ParseSpec([]byte(fmt.Sprintf(demoSpec, base, base)))
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			id := "demo-" + newRunID()[len("run-"):]
			run, err := startRun(ctx, stack.client, id, spec)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "started run %s: %s\n", id, spec.Goal)
			result, err := awaitRun(ctx, run)
			if err != nil {
				return err
			}
			printResult(out, result)
			fmt.Fprintln(out, "\n--- ledger ---")
			if err := showRun(ctx, out, stack.store, id, false); err != nil {
				return err
			}
			leaves, err := stack.store.ListLeafCalls(ctx, id)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "\nleaf calls (%d):\n", len(leaves))
			for _, l := range leaves {
				line := fmt.Sprintf("  %-28s attempt %d  %-6s %-14s %s", l.ActivityID, l.Attempt, l.Kind, l.Target, l.Outcome)
				if l.Error != "" {
					line += "  " + oneLine(l.Error, 70)
				}
				fmt.Fprintln(out, line)
			}
			desk.report(out)
			fmt.Fprintf(out, "\nUI: %s\n", uiLink(stack.cfg.Namespace, id))
			if exit {
				return nil
			}
			fmt.Fprintln(out, "the stack stays up; Ctrl-C stops it")
			<-ctx.Done()
			return nil
		},
	}
	cmd.Flags().BoolVar(&exit, "exit", false, "exit after the run instead of staying up")
	cmd.Flags().StringVar(&temporalBin, "temporal", "", "the Temporal CLI binary (default: bin/temporal)")
	return cmd
}

// demoSpec is the demo's run: a scripted model that looks an order up (the
// lookup is flaky), refunds it through an idempotent HTTP tool, counts the
// words of its note with a Go tool, and answers.
const demoSpec = `
goal: Order A-1001 arrived broken. Check the order, refund it if it is eligible, and summarise what you did.
budget: {steps: 6, tokens: 20000}
model:
  provider: scripted
  script:
    - content: Let me look the order up first.
      tool_calls: [{name: lookup_order, arguments: {order_id: A-1001}}]
    - content: The order is eligible, so I will refund it and check my note's length.
      tool_calls:
        - {name: issue_refund, arguments: {order_id: A-1001, amount_eur: 42.5, reason: arrived broken}}
        - {name: word_count, arguments: {text: "Refunded 42.50 EUR for order A-1001, which arrived broken."}}
    - content: Order A-1001 was eligible; I refunded 42.50 EUR (refund recorded in the ledger) and told the customer.
tools:
  - name: lookup_order
    description: Look an order up by its ID.
    kind: http
    method: GET
    url: %s/orders
    parameters: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
  - name: issue_refund
    description: Refund an order. Idempotent by the Idempotency-Key header.
    kind: http
    url: %s/refunds
    parameters:
      type: object
      properties: {order_id: {type: string}, amount_eur: {type: number}, reason: {type: string}}
      required: [order_id, amount_eur]
  - name: word_count
    description: Count the words in a text.
    kind: go
    parameters: {type: object, properties: {text: {type: string}}, required: [text]}
`

// refundDesk is the demo's outside world: an order lookup that fails each
// key's first attempt, and a refund endpoint that applies each
// Idempotency-Key once, as a payment API does.
type refundDesk struct {
	mu       sync.Mutex
	lookups  map[string]int
	refunds  map[string]string
	requests int
}

func newRefundDesk() *refundDesk {
	return &refundDesk{lookups: map[string]int{}, refunds: map[string]string{}}
}

func (d *refundDesk) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.requests++
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/orders":
		d.lookups[key]++
		if d.lookups[key] == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":"order service is warming up"}`)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"order_id": r.URL.Query().Get("order_id"), "status": "delivered", "amount_eur": 42.5, "eligible_for_refund": true,
		})
	case r.Method == http.MethodPost && r.URL.Path == "/refunds":
		id, ok := d.refunds[key]
		if !ok {
			id = fmt.Sprintf("rf_%03d", len(d.refunds)+1)
			d.refunds[key] = id
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"refund_id": id, "replayed": ok})
	default:
		http.Error(w, `{"error":"no such endpoint"}`, http.StatusNotFound)
	}
}

func (d *refundDesk) report(out io.Writer) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(out, "\nrefund desk: %d requests, %d refunds applied (one per idempotency key)\n", d.requests, len(d.refunds))
}
