// Command starter starts an agentsaga run from Go and prints how it ended.
// A run ID may be used once: a second start under it is refused, because
// the run's idempotency keys are made from it. The ledger is asked too: it
// remembers an ID after Temporal has forgotten it.
//
//	TEMPORAL_ADDRESS=127.0.0.1:7233 DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentsaga \
//	  go run ./examples/starter -id refund-o-1 -goal "refund order o-1"
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/ledger"
)

// Start starts the run, refusing an ID the ledger or Temporal has had, and
// waits for its result; a failed run is a result too (its reason and
// trace), not an error.
func Start(ctx context.Context, c client.Client, store *ledger.Store, id string, spec agentsaga.RunSpec) (agentsaga.RunResult, error) {
	run, err := agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{Ledger: store})
	if err != nil {
		return agentsaga.RunResult{}, err
	}
	result, err := run.Result(ctx)
	var failed *agentsaga.RunFailedError
	if errors.As(err, &failed) {
		return failed.Result, nil
	}
	return result, err
}

func main() {
	id := flag.String("id", "", "the run's ID (once per run)")
	goal := flag.String("goal", "", "what the run is to do")
	model := flag.String("model", "gpt-4o-mini", "the model, on OPENAI_BASE_URL (any OpenAI-compatible server)")
	flag.Parse()
	c, err := client.Dial(client.Options{HostPort: os.Getenv("TEMPORAL_ADDRESS")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	store, err := ledger.Open(context.Background(), cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/agentsaga"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	spec := agentsaga.RunSpec{
		Goal:   *goal,
		Budget: agentsaga.Budget{Steps: 10, USD: 0.50},
		Model:  agentsaga.ModelSpec{Provider: "openai", Name: *model, BaseURL: os.Getenv("OPENAI_BASE_URL"), APIKeyEnv: "OPENAI_API_KEY"},
	}
	result, err := Start(context.Background(), c, store, *id, spec)
	var exists *agentsaga.RunExistsError
	switch {
	case errors.As(err, &exists):
		log.Fatalf("run %s exists already; pick a new ID", exists.ID)
	case err != nil:
		log.Fatal(err)
	}
	fmt.Printf("%s: %s\n%s\n", result.Status, result.Reason, result.Answer)
}
