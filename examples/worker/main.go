// Command worker is a Go team's own Temporal worker running agentsaga with
// the team's typed tools: it opens a ticket in the team's helpdesk (and
// closes it again if the run fails), and looks up a customer. It runs
// beside the team's own workflows and activities on the same worker.
//
//	DATABASE_URL=postgres://... TEMPORAL_ADDRESS=127.0.0.1:7233 go run ./examples/worker
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/migrations"
)

// Helpdesk stands in for the team's ticket system. It deduplicates by
// idempotency key, as a real one must for a tool that retries.
type Helpdesk struct {
	mu      sync.Mutex
	tickets map[string]string // key -> ticket ID
	closed  map[string]bool   // ticket ID -> closed
}

func NewHelpdesk() *Helpdesk {
	return &Helpdesk{tickets: map[string]string{}, closed: map[string]bool{}}
}

type OpenTicketArgs struct {
	Customer string `json:"customer" jsonschema:"the customer's ID"`
	Subject  string `json:"subject" jsonschema:"one line saying what is wrong"`
}

type Ticket struct {
	ID string `json:"id"`
}

type CloseTicketArgs struct {
	ID string `json:"id"`
}

type Closed struct {
	Closed string `json:"closed"`
}

type LookupArgs struct {
	Customer string `json:"customer"`
}

type Customer struct {
	ID   string `json:"id"`
	Plan string `json:"plan"`
}

// Tools are the team's tools, for the engine and for the runs' specs.
func (h *Helpdesk) Tools() ([]agentsaga.Tool, error) {
	open, err := agentsaga.NewTool("open_ticket", "Open a helpdesk ticket for a customer.",
		func(ctx context.Context, args OpenTicketArgs) (Ticket, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			key := agentsaga.CallKey(ctx)
			if id, ok := h.tickets[key]; ok {
				return Ticket{ID: id}, nil // a retry of a call that already opened it
			}
			id := fmt.Sprintf("T-%d", len(h.tickets)+1)
			h.tickets[key] = id
			return Ticket{ID: id}, nil
		},
		agentsaga.WithCompensation("close_ticket", map[string]string{"id": "{{result.id}}"}))
	if err != nil {
		return nil, err
	}
	closeTicket, err := agentsaga.NewTool("close_ticket", "Close a ticket opened by mistake.",
		func(ctx context.Context, args CloseTicketArgs) (Closed, error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.closed[args.ID] = true
			return Closed{Closed: args.ID}, nil
		})
	if err != nil {
		return nil, err
	}
	lookup, err := agentsaga.NewTool("lookup_customer", "Look a customer up by ID.",
		func(ctx context.Context, args LookupArgs) (Customer, error) {
			if args.Customer == "" {
				return Customer{}, agentsaga.Permanent(fmt.Errorf("lookup_customer: customer is empty"))
			}
			return Customer{ID: args.Customer, Plan: "pro"}, nil
		})
	if err != nil {
		return nil, err
	}
	return []agentsaga.Tool{open, closeTicket, lookup}, nil
}

// Open reports whether the ticket is open.
func (h *Helpdesk) Open(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.tickets {
		if t == id {
			return !h.closed[id]
		}
	}
	return false
}

// NewEngine builds the engine with the team's tools on store.
func NewEngine(ctx context.Context, store *ledger.Store, c client.Client, h *Helpdesk) (*agentsaga.Engine, error) {
	tools, err := h.Tools()
	if err != nil {
		return nil, err
	}
	return agentsaga.New(ctx, store, agentsaga.Config{Tools: tools, Temporal: c})
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	databaseURL := os.Getenv("DATABASE_URL")
	if _, err := migrations.Apply(ctx, databaseURL); err != nil {
		log.Fatal(err)
	}
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	c, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	engine, err := NewEngine(ctx, store, c, NewHelpdesk())
	if err != nil {
		log.Fatal(err)
	}
	w := worker.New(c, engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
	engine.Register(w)
	// The team's own workflows and activities register here too.
	if err := w.Start(); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done()
	w.Stop()
}
