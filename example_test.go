package agentsaga_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
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
// activities. With a Temporal client, New also makes sure of the
// reconciler's Schedule; Close, after the worker stopped, sends the last
// success bonuses before the store closes.
func ExampleEngine_Register() {
	ctx := context.Background()
	c, _ := client.Dial(client.Options{})
	store, _ := ledger.Open(ctx, "postgres://postgres@127.0.0.1:5432/agentsaga")
	defer store.Close()
	engine, _ := agentsaga.New(ctx, store, agentsaga.Config{Temporal: c})
	defer engine.Close()
	w := worker.New(c, engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
	engine.Register(w)
	_ = w.Run(worker.InterruptCh())
}

// The engine's workflow types are namespaced, as its activities are, so a
// team's own workflow may be called AgentRun.
func ExampleEngine_Register_names() {
	fmt.Println(agentsaga.AgentRunWorkflow)
	// Output:
	// agentsaga.AgentRun
}

// Starting a run and waiting for how it ended. With the ledger, an ID any
// run has had is refused, even one Temporal has forgotten.
func ExampleStart() {
	ctx := context.Background()
	c, _ := client.Dial(client.Options{})
	store, _ := ledger.Open(ctx, "postgres://postgres@127.0.0.1:5432/agentsaga")
	spec := agentsaga.RunSpec{Goal: "refund order o-1"} // and a model, a budget, tools
	run, err := agentsaga.Start(ctx, c, "refund-o-1", spec, agentsaga.StartOptions{Ledger: store})
	var exists *agentsaga.RunExistsError
	if errors.As(err, &exists) {
		return // the ID is taken: pick another, or Get the run that has it
	}
	if err != nil {
		return
	}
	// Compile-only (it needs a server): the result says how the run ended,
	// "completed", "partial", "escalated", ...
	result, _ := run.Result(ctx)
	_ = result.Status
}

// A starter inside a team's worker process starts through the engine: the
// engine's ledger refuses an ID any run has had, even one Temporal has
// forgotten (a restarted dev server, the retention), and its task queue
// and model providers are filled in.
func ExampleEngine_Start() {
	ctx := context.Background()
	c, _ := client.Dial(client.Options{})
	store, _ := ledger.Open(ctx, "postgres://postgres@127.0.0.1:5432/agentsaga")
	engine, _ := agentsaga.New(ctx, store, agentsaga.Config{Temporal: c})
	spec := agentsaga.RunSpec{Goal: "refund order o-1"} // and a model, a budget, tools
	run, err := engine.Start(ctx, c, "refund-o-1", spec, agentsaga.StartOptions{})
	var exists *agentsaga.RunExistsError
	if errors.As(err, &exists) && exists.InLedger {
		return // a run had this ID; Temporal no longer knows it, the ledger does
	}
	if err != nil {
		return // compile-only: it needs a server
	}
	_, _ = run.Result(ctx)
}

// Start with no ledger to ask is refused, naming what is missing: the ID
// could be one Temporal has forgotten, and the run would be answered from
// the old run's ledger rows. StartOptions.SkipLedgerCheck takes that risk
// explicitly.
func ExampleErrNoLedger() {
	spec := agentsaga.RunSpec{Goal: "refund order o-1", Budget: agentsaga.Budget{Steps: 3},
		Model: agentsagatest.Script(agentsagatest.Answer("refunded"))}
	_, err := agentsaga.Start(context.Background(), nil, "refund-o-1", spec, agentsaga.StartOptions{})
	fmt.Println(errors.Is(err, agentsaga.ErrNoLedger))
	fmt.Println(err)
	// Output:
	// true
	// agentsaga: start run refund-o-1: no ledger to check the run ID against: set StartOptions.Ledger (or start with Engine.Start), or StartOptions.SkipLedgerCheck to accept that an ID reused after Temporal lost its history is answered from the old run's ledger rows
}

// A spec that fails validation is refused before anything is asked of
// Temporal or the ledger.
func ExampleInvalidSpecError() {
	_, err := agentsaga.Start(context.Background(), nil, "refund-o-1", agentsaga.RunSpec{Goal: "refund order o-1"}, agentsaga.StartOptions{})
	var invalid *agentsaga.InvalidSpecError
	fmt.Println(errors.As(err, &invalid))
	fmt.Println(err)
	// Output:
	// true
	// agentsaga: spec: model.provider: missing (want one of scripted, openai, anthropic, openai-responses, azure, anthropic-bedrock, anthropic-vertex, gemini)
}

// A decision the run cannot take now is refused at once, with the run's
// reason; nothing changed, and it may be sent again once the run waits
// for it.
func ExampleRun_Resume() {
	ctx := context.Background()
	c, _ := client.Dial(client.Options{})
	run := agentsaga.Get(c, "refund-o-1")
	err := run.Resume(ctx, agentsaga.ResumeInput{Message: "refund it, the customer has the receipt", AddSteps: 2})
	// Compile-only (it needs a server). A run that is not waiting for a
	// human refuses, with: agentsaga: resume run refund-o-1: the run
	// refused the decision: resume: the run is not waiting for a human
	var refused *agentsaga.RefusedError
	if errors.As(err, &refused) {
		_ = refused.Reason
	}
}

// A replay beside its recording: the calls that diverged, from which turn.
func ExampleReportReplay() {
	ctx := context.Background()
	store, err := ledger.Open(ctx, "postgres://localhost:5432/agentsaga")
	if err != nil {
		return // compile-only: it needs a ledger holding the replay
	}
	defer store.Close()
	report, err := agentsaga.ReportReplay(ctx, store, "replay-refund-o-1-1")
	if errors.Is(err, agentsaga.ErrNotAReplay) {
		return // the run replays no recording
	}
	for _, row := range report.Rows {
		if row.Kind != agentsaga.ReplaySame {
			fmt.Printf("turn %d: %s\n", row.Step, row.Kind)
		}
	}
}

// A refused decision, as Resume, Abort, Retry and Skip return it.
func ExampleRefusedError() {
	var err error = &agentsaga.RefusedError{ID: "refund-o-1", Decision: "retry",
		Reason: "retry: the run is waiting on an escalation (resume or abort), where retry does not apply"}
	var refused *agentsaga.RefusedError
	fmt.Println(errors.As(err, &refused), refused.Decision)
	fmt.Println(err)
	// Output:
	// true retry
	// agentsaga: retry run refund-o-1: the run refused the decision: retry: the run is waiting on an escalation (resume or abort), where retry does not apply
}

type refundArgs struct {
	Order  string  `json:"order"`
	Amount float64 `json:"amount"`
}

// A tool whose calls over 100 wait for a human, that no call may take past
// 500, and whose refunds in one run total at most 200. A rule that does
// not compile against the arguments is refused here, naming it.
func ExampleWithApproval() {
	refund := func(ctx context.Context, args refundArgs) (string, error) { return "refunded " + args.Order, nil }
	tool, err := agentsaga.NewTool("refund", "Refund an order.", refund,
		agentsaga.WithApproval(agentsagatype.ApprovalSpec{When: "amount > 100"}),
		agentsaga.WithLimits(agentsagatype.LimitSpec{Call: "amount <= 500"}, agentsagatype.LimitSpec{RunSum: "amount", AtMost: 200}))
	fmt.Println(tool.Spec().Approval.When, len(tool.Spec().Limits), err)

	_, err = agentsaga.NewTool("refund", "Refund an order.", refund,
		agentsaga.WithApproval(agentsagatype.ApprovalSpec{When: "amout > 100"}))
	fmt.Println(err != nil && strings.Contains(err.Error(), `approval.when: "amout > 100" does not compile`))
	// Output:
	// amount > 100 2 <nil>
	// true
}

// Deciding on a call that waits for approval. Approve returns the ledger's
// record once the run has written who decided; the call is then sent once.
// A call another operator decided first is an *AlreadyDecidedError with
// that decision, read from the ledger the handle has.
func ExampleRun_Approve() {
	ctx := context.Background()
	c, _ := client.Dial(client.Options{})
	store, _ := ledger.Open(ctx, "postgres://postgres@127.0.0.1:5432/agentsaga")
	run := agentsaga.Get(c, "refund-o-1").WithLedger(store)
	waiting, err := run.Approvals(ctx)
	if err != nil || len(waiting) == 0 {
		return // compile-only: it needs a server
	}
	approval, err := run.Approve(ctx, waiting[0].Call, "alice@example.com", "the order is paid")
	var first *agentsaga.AlreadyDecidedError
	var refused *agentsaga.RefusedError
	switch {
	case errors.As(err, &first):
		_, _, _ = first.By, first.At, first.Reason // the first decision stands
	case errors.As(err, &refused):
		_ = refused.Reason // e.g. no call ... waits for approval in this run (waiting: ...)
	}
	_ = approval.DecidedAt
}

// A replay's candidate model, as `agentsaga replay --model` reads it. A
// scripted model's turns are in a spec, so it is refused here.
func ExampleParseModel() {
	m, err := agentsaga.ParseModel("openai:gpt-4o-mini")
	fmt.Println(m.Provider, m.Name, err)
	_, err = agentsaga.ParseModel("scripted")
	fmt.Println(err)
	// Output:
	// openai gpt-4o-mini <nil>
	// model "scripted": a scripted model's turns are in a spec; pass --spec FILE
}
