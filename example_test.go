package agentsaga_test

import (
	"context"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/ledger"
)

type lookupArgs struct {
	Customer string `json:"customer" jsonschema:"the customer's ID"`
	Limit    int    `json:"limit,omitempty" jsonschema:"how many orders at most"`
}

type lookupResult struct {
	Orders []string `json:"orders"`
}

// A typed tool: its arguments' JSON schema comes from the struct.
func ExampleNewTool() {
	lookup, err := agentsaga.NewTool("lookup_orders", "List a customer's recent orders.",
		func(ctx context.Context, args lookupArgs) (lookupResult, error) {
			return lookupResult{Orders: []string{"o-1"}}, nil
		})
	if err != nil {
		panic(err)
	}
	fmt.Println(lookup.Spec().Name, lookup.Spec().Kind)
	fmt.Println(string(lookup.Spec().Parameters))
	// Output:
	// lookup_orders go
	// {"type":"object","properties":{"customer":{"type":"string","description":"the customer's ID"},"limit":{"type":"integer","description":"how many orders at most"}},"required":["customer"],"additionalProperties":false}
}

// A team's own worker runs the engine beside its own workflows and
// activities.
func ExampleEngine_Register() {
	ctx := context.Background()
	c, _ := client.Dial(client.Options{})
	store, _ := ledger.Open(ctx, "postgres://postgres@127.0.0.1:5432/agentsaga")
	engine, _ := agentsaga.New(ctx, store, agentsaga.Config{Temporal: c})
	w := worker.New(c, engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
	engine.Register(w)
	_ = w.Run(worker.InterruptCh())
}

// Starting a run and waiting for how it ended.
func ExampleStart() {
	ctx := context.Background()
	c, _ := client.Dial(client.Options{})
	spec := agentsaga.RunSpec{Goal: "refund order o-1"} // and a model, a budget, tools
	run, err := agentsaga.Start(ctx, c, "refund-o-1", spec, agentsaga.StartOptions{})
	if err != nil {
		fmt.Println(err) // a *RunExistsError for an ID already used
		return
	}
	result, err := run.Result(ctx)
	fmt.Println(result.Status, err)
}
