// Command mcp is an MCP server a Go team might own, built with the official
// go-sdk, and the spec of a run that calls it through agentsaga. The
// server's invoice tool deduplicates by the idempotency key agentsaga sends
// in each request's _meta, so a retried call bills once.
//
// The tool is written the go-sdk's usual typed way (mcp.AddTool with a
// concrete output type), so it fails the usual typed way too: its handler
// returns an error, which the SDK sends as the result's text with isError
// set. agentsaga reads the HTTP status from that text ("status 400",
// "HTTP 503", or a status with its reason as resp.Status writes it, "503
// Service Unavailable"): a 503 is retried under the same key, a 400 is
// not. A result's structuredContent cannot carry it: the SDK replaces it
// with the zero output value.
//
//	go run ./examples/mcp -addr 127.0.0.1:8765    # then a spec with kind: mcp, url: http://127.0.0.1:8765/mcp
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/agentsagatype"
)

// Billing is the team's invoicing, behind MCP.
type Billing struct {
	// Outage is how many calls the billing backend answers 503 before it
	// is back.
	Outage int

	mu       sync.Mutex
	invoices map[string]string // idempotency key -> invoice ID
	issued   int               // invoices actually issued
	calls    int               // calls of create_invoice
}

type InvoiceArgs struct {
	Customer string  `json:"customer" jsonschema:"the customer's ID"`
	Amount   float64 `json:"amount" jsonschema:"in euros"`
}

type Invoice struct {
	ID string `json:"id"`
}

// Server is the MCP server with the billing tools.
func (b *Billing) Server() *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "create_invoice", Description: "Issue an invoice to a customer."},
		func(ctx context.Context, req *mcp.CallToolRequest, args InvoiceArgs) (*mcp.CallToolResult, Invoice, error) {
			key, _ := req.Params.Meta[agentsagatype.MCPMetaIdempotencyKey].(string)
			if key == "" {
				// Not retried: the same request would lack it again.
				return nil, Invoice{}, errors.New("status 400: no idempotency key in _meta")
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			b.calls++
			if b.Outage > 0 {
				b.Outage--
				// Retried, after the retry hook has paid for it.
				return nil, Invoice{}, fmt.Errorf("billing backend: %d %s", http.StatusServiceUnavailable, http.StatusText(http.StatusServiceUnavailable))
			}
			if b.invoices == nil {
				b.invoices = map[string]string{}
			}
			id, ok := b.invoices[key]
			if !ok {
				b.issued++
				id = fmt.Sprintf("INV-%d", b.issued)
				b.invoices[key] = id
			}
			return nil, Invoice{ID: id}, nil
		})
	return server
}

// Issued counts the invoices actually issued.
func (b *Billing) Issued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.issued
}

// Calls counts the calls of create_invoice, failed ones included.
func (b *Billing) Calls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// Keys lists the idempotency keys invoices were issued under.
func (b *Billing) Keys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := make([]string, 0, len(b.invoices))
	for key := range b.invoices {
		keys = append(keys, key)
	}
	return keys
}

// Handler serves the server over streamable HTTP.
func (b *Billing) Handler() http.Handler {
	server := b.Server()
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
}

// Spec is a run that bills a customer through the server at url.
func Spec(url string) string {
	return fmt.Sprintf(`goal: invoice ann 40 euros
budget: {steps: 4}
model:
  provider: scripted
  script:
    - tool_calls: [{name: billing_create_invoice, arguments: {customer: ann, amount: 40}}]
    - content: invoiced ann
tools:
  - name: billing
    kind: mcp
    url: %s
    allow: [create_invoice]
`, url)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8765", "where to serve MCP (path /mcp)")
	flag.Parse()
	mux := http.NewServeMux()
	mux.Handle("/mcp", (&Billing{}).Handler())
	log.Printf("billing MCP server on http://%s/mcp", *addr)
	log.Fatal(http.ListenAndServe(*addr, mux))
}
