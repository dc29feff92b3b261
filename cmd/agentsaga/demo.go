package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
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

			desk, seed := newRefundDesk(), &seedDesk{}
			mux := http.NewServeMux()
			mux.Handle("/orders", desk)
			mux.Handle("/refunds", desk)
			mux.Handle("/search", seed)
			mux.Handle("/lookup", seed)
			listener, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return fmt.Errorf("demo: listen on loopback: %w", err)
			}
			server := &http.Server{Handler: mux}
			go func() { _ = server.Serve(listener) }()
			defer server.Close()
			base := "http://" + listener.Addr().String()
			fmt.Fprintf(out, "demo tools on %s: a refund desk (lookup_order fails its first attempt with 503) and seed 002's search (succeeds every third call) and lookup (400)\n", base)

			fmt.Fprintln(out, "\n=== 1. a refund, through a flaky lookup and an idempotent refund ===")
			if _, err := demoRun(ctx, out, stack, "demo-refund", fmt.Sprintf(demoSpec, base, base), false); err != nil {
				return err
			}
			desk.report(out)
			fmt.Fprintln(out, "\n=== 2. seed 002: a flaky search, a malformed lookup, a retry budget and a graceful finish ===")
			seed002, err := demoRun(ctx, out, stack, "demo-seed002", fmt.Sprintf(seedSpec, base, base), true)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, "\n=== 3. replay: seed 002's run again, every tool answered from its ledger (agentsaga replay) ===")
			if err := demoReplay(ctx, out, stack, seed, seed002); err != nil {
				return err
			}
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

// demoRun starts one scripted run, waits for it, and prints its trace (with
// the budget notes the model read, if notes is set), its ledger rows and
// every leaf call.
func demoRun(ctx context.Context, out io.Writer, stack *devStack, prefix, specText string, notes bool) (string, error) {
	spec, err := workflows.ParseSpec([]byte(specText))
	if err != nil {
		return "", fmt.Errorf("demo: %w", err)
	}
	id := prefix + "-" + newRunID()[len("run-"):]
	run, err := startRun(ctx, stack.client, stack.store, stack.cfg.Namespace, id, spec, "", 0)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(out, "started run %s: %s\n", id, spec.Goal)
	result, err := awaitRun(ctx, run)
	if err != nil {
		return "", err
	}
	if notes {
		fmt.Fprintln(out, "\nwhat the model read each turn, and what happened:")
		for _, e := range result.Trace {
			if e.Kind == "model" {
				fmt.Fprintf(out, "\n%s\n", e.Note)
				continue
			}
			outcome := ">> got: " + oneLine(e.Output, 80)
			if e.Error != "" {
				outcome = ">> gave up: " + oneLine(e.Error, 120)
			}
			fmt.Fprintf(out, "%s %s (%d attempts) %s\n", e.Tool, e.Arguments, e.Attempts, outcome)
		}
		fmt.Fprintln(out)
	}
	printResult(out, result)
	fmt.Fprintln(out, "\n--- ledger ---")
	if err := showRun(ctx, out, ledgerdb.Of(stack.store), id, false); err != nil {
		return "", err
	}
	leaves, err := ledgerdb.Of(stack.store).ListLeafCalls(ctx, id)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(out, "\nleaf calls (%d):\n", len(leaves))
	for _, l := range leaves {
		line := fmt.Sprintf("  %-28s attempt %d  %-6s %-14s %s", l.ActivityID, l.Attempt, l.Kind, l.Target, l.Outcome)
		if l.Error != "" {
			line += "  " + oneLine(l.Error, 70)
		}
		fmt.Fprintln(out, line)
	}
	fmt.Fprintln(out)
	if link := uiLink(stack.cfg.TemporalAddress, stack.cfg.Namespace, id); link != "" {
		fmt.Fprintf(out, "UI:   %s\n", link)
	}
	if stack.apiBase != "" {
		fmt.Fprintf(out, "live: %s/runs/%s (the run's own page; give it the api key printed above)\n", stack.apiBase, url.PathEscape(id))
	}
	return id, nil
}

// demoReplay replays the recorded run source with its own script and
// prints the report's first lines, and what the tools heard meanwhile.
func demoReplay(ctx context.Context, out io.Writer, stack *devStack, desk *seedDesk, source string) error {
	before := desk.count()
	id, err := replay(ctx, stack.store, source, agentsaga.ReplayOptions{}, func(ctx context.Context, id string, spec workflows.RunSpec) error {
		return startAndAwait(ctx, stack.client, stack.store, stack.cfg.Namespace, id, spec)
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	report, err := agentsaga.ReportReplay(ctx, stack.store, id)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	var text strings.Builder
	report.Print(&text)
	// The calls side by side and the divergences; the figures after them
	// are the replay command's.
	for line := range strings.Lines(text.String()) {
		fmt.Fprint(out, line)
		if strings.HasPrefix(line, "divergences:") {
			break
		}
	}
	fmt.Fprintf(out, "...\nthe search and lookup servers received %d requests during the replay (agentsaga replay %s for the whole report)\n",
		desk.count()-before, source)
	return nil
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

// seedDesk is seed 002's outside world: a search backend that succeeds on
// every third call and answers 503 otherwise, and a lookup that always
// answers 400 (a malformed filter expression). It counts every request.
type seedDesk struct {
	mu       sync.Mutex
	searches int
	lookups  int
}

func (d *seedDesk) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.searches + d.lookups
}

func (d *seedDesk) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch r.URL.Path {
	case "/search":
		d.searches++
		if d.searches%3 != 0 {
			http.Error(w, `{"error":"search backend"}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, `{"results": 3, "call": %d}`, d.searches)
	case "/lookup":
		d.lookups++
		http.Error(w, `{"error":"malformed filter expression"}`, http.StatusBadRequest)
	}
}

// seedSpec is seed 002's demo as a run spec. The seed's 12 steps are its
// tool attempts, which is this project's leaf-call dimension; here model
// turns are leaf calls too, so the reproduction allows 12 tool attempts
// plus 6 model turns.
const seedSpec = `
goal: Look up the customer's order, then research five support topics and report what you found.
budget: {steps: 12, leaf_calls: 18, tokens: 20000, usd: 0.40, seconds: 90}
finish_at: 0.25
retry: {max_attempts: 3, ratio: 0.2, floor: 5, tool_retry_cap: 6, backoff_base_seconds: 0.5, backoff_cap_seconds: 8}
prices: {tool_call_usd: 0.02}
model:
  provider: scripted
  script:
    - tool_calls: [{name: lookup, arguments: {filter: "id = ???"}}]
    - tool_calls: [{name: search, arguments: {q: refund policy}}]
    - tool_calls: [{name: search, arguments: {q: shipping SLA}}]
    - tool_calls: [{name: search, arguments: {q: tax rules}}]
    - tool_calls: [{name: search, arguments: {q: returns window}}]
    - tool_calls: [{name: search, arguments: {q: warranty terms}}]
    - content: all five topics covered
  script_finish:
    content: |-
      PARTIAL ANSWER: found results for refund policy, shipping SLA and returns window.
      HANDOFF NOTE: covered 3 of 5 topics; tax rules failed because the search backend kept answering 503 and the run's retry budget was spent; warranty terms was not reached. The lookup filter is malformed (400) and needs a human. Next: retry tax rules and warranty terms when search is healthy.
tools:
  - {name: search, kind: http, url: "%s/search", parameters: {type: object, properties: {q: {type: string}}, required: [q]}}
  - {name: lookup, kind: http, url: "%s/lookup"}
`
