// Package agentsaga runs long-lived LLM agent runs on a team's own
// Temporal workers, with every model and tool call keyed, budgeted and
// written to a Postgres ledger. It is a facade over the engine's rooms:
// the workflow (package workflows), the activities and the retry hook
// (package activities), the ledger (package ledger) and the budgets
// (package budget) do the work; this package wires them and names them.
//
// # A worker
//
// [New] builds an [Engine] over a [ledger.Store] (from [ledger.New] on
// the team's pgx pool, or [ledger.Open]). [Engine.Register] puts the
// engine's workflows and activities on the team's worker, and
// [Engine.WorkerOptions] adds the interceptors: the retry hook and the one
// that keeps a run's sub-agents under [AgentRunWorkflow]. [Engine.Close]
// flushes what the retry hook holds, after the worker stopped.
//
//	store, _ := ledger.New(pool)
//	engine, _ := agentsaga.New(ctx, store, agentsaga.Config{Temporal: c, Tools: []agentsaga.Tool{lookup}})
//	defer engine.Close()
//	w := worker.New(c, engine.TaskQueue(), engine.WorkerOptions(worker.Options{}))
//	engine.Register(w)
//
// A team's tools are Go functions made typed by [NewTool], which derives
// the arguments' JSON schema from a struct; [WithTimeout],
// [WithCompensation], [Irreversible], [ReadOnly], [WithApproval],
// [WithLimits] and [WithRefusal] shape them. Inside a tool, [CallKey] is
// the call's idempotency key, and [Permanent] marks an error that no
// retry can fix. Its own model providers go in [Config].Models.
//
// # Starting a run
//
// [Start] (or [Engine.Start], with the engine's ledger, task queue and
// providers) validates a [RunSpec], writes its defaults out, and starts
// the run. It asks the ledger first, which remembers every run ID after
// Temporal forgot it, and refuses an ID any run has had with a
// [*RunExistsError]; without a ledger it returns [ErrNoLedger], unless
// [StartOptions].SkipLedgerCheck takes that risk. A spec that fails
// validation is an [*InvalidSpecError], and nothing starts.
//
//	run, err := engine.Start(ctx, c, "refund-42", spec, agentsaga.StartOptions{})
//	result, err := run.Result(ctx)
//
// # The run handle
//
// A [Run] (from [Start], or [Get] for a run started elsewhere) reads the
// run: [Run.Result], [Run.Status], [Run.Budget], [Run.Trace]. It answers a
// run waiting for a human: [Run.Resume], [Run.Abort], [Run.Retry] and
// [Run.Skip] for an escalated run or a stalled compensation, and
// [Run.Approvals], [Run.Approve] and [Run.Deny] for a call waiting for
// approval. A decision the run cannot take now is a [*RefusedError]; a
// decision another operator took first is an [*AlreadyDecidedError]
// (errors.As finds either). [Run.Result] returns a
// run that failed as a [*RunFailedError].
//
// The schema is applied by package migrations (its Apply) or
// `agentsaga migrate`, never implicitly. The repository's docs/go-api.md
// is the tour of this API; ARCHITECTURE.md describes the rooms.
package agentsaga
