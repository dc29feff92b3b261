package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/dataset"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

func datasetCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "dataset", Short: "Keep recorded runs in a dataset file, for agentsaga eval"}
	var redact []string
	add := &cobra.Command{
		Use:   "add FILE RUN_ID... [--redact '$.customer.email']...",
		Short: "Append recorded runs to a dataset file (JSONL, one run a line)",
		Long: `add reads each ended run from the ledger (its goal, spec, the tool calls its model asked
for with their arguments, outputs or errors, attempts and approval decisions, its answer,
status and spend) and appends it to FILE as one line, with no checks: write those by hand.
Each --redact path ($.customer.email, $.items[*].email) is replaced by "[redacted]" in the
goal, the answer, and each call's arguments and output, where they are JSON. A run the
ledger does not have, or a path that does not parse, writes nothing.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := dataset.ParsePaths(redact); err != nil {
				return err
			}
			store, err := ledger.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			var entries []dataset.Entry
			for _, id := range args[1:] {
				e, err := dataset.Export(cmd.Context(), ledgerdb.Of(store), id)
				if err != nil {
					return err
				}
				if err := dataset.Redact(&e, redact); err != nil {
					return err
				}
				entries = append(entries, e)
			}
			if err := dataset.Append(args[0], entries...); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %d runs to %s\n", len(entries), args[0])
			return nil
		},
	}
	add.Flags().StringArrayVar(&redact, "redact", nil, "a JSON path to redact ($.customer.email); repeat for more")
	cmd.AddCommand(add)
	return cmd
}

// errChecksFailed makes eval exit non-zero, after its table.
var errChecksFailed = errors.New("eval: some checks failed")

func evalCommand() *cobra.Command {
	var model, specPath, instructionsPath, match, forkAt string
	var live []string
	var concurrency int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "eval FILE [--model provider:name] [--spec FILE] [--instructions FILE] [--match in-order|any-order] [--live TOOL]... [--fork-at STEP] [--concurrency N] [--json]",
		Short: "Replay every run of a dataset with a candidate model or prompt, and check each",
		Long: `eval brings each entry of the dataset FILE into the ledger as a recorded run (under
eval-NAME-LLINE-DIGEST; again is a no-op), replays it on the workers as agentsaga replay does,
every tool answered from the recording and nothing sent to the world, with the changes
--model, --spec or --instructions make, and runs the entry's checks on the replay. A tool
--live names (one the spec marks read_only) is called for real. It prints a line an entry
and exits non-zero when any check fails.

With --fork-at STEP, each entry's steps before STEP are replayed as the recording made them
(its model's calls scripted, every tool answered from it: no model and no tool is asked),
and the run is forked at STEP (as agentsaga fork does) into the candidate, which answers
from STEP on, its tools answered from the recording in any order (--match aside) but those
--live names; the checks judge the fork. A step the entry did not make, or a step before
STEP at which its model asked for no tool call or started a sub-agent, fails that entry.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := replayOptions(model, specPath, instructionsPath)
			if err != nil {
				return fmt.Errorf("eval: %w", err)
			}
			opts.Match, opts.Live = match, live
			at := 0
			if forkAt != "" {
				if at, err = agentsaga.ParseForkAt(forkAt); err != nil || at == agentsaga.ForkAtFailed {
					return fmt.Errorf("eval: --fork-at %q: give a step number from 1, the first step the candidate answers", forkAt)
				}
			}
			lines, err := dataset.Read(args[0])
			if err != nil {
				return err
			}
			cfg, c, store, closeAll, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer closeAll()
			outcomes, err := evalDataset(cmd.Context(), store, args[0], lines, opts, at, concurrency,
				func(ctx context.Context, id string, spec workflows.RunSpec, fork bool) error {
					if !fork {
						return startAndAwait(ctx, c, store, cfg.Namespace, id, spec)
					}
					// The fork's move wrote its run row: the ledger's check
					// of a new ID would refuse it.
					run, err := agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{Namespace: cfg.Namespace, Ledger: store, SkipLedgerCheck: true})
					if err != nil {
						return err
					}
					_, err = awaitRun(ctx, run)
					return err
				})
			if err != nil {
				return err
			}
			return printOutcomes(cmd, outcomes, asJSON)
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "the candidate model, provider:name (openai:gpt-4o-mini)")
	cmd.Flags().StringVar(&specPath, "spec", "", "the candidate spec: its model, tools, budget and instructions; each goal stays the entry's")
	cmd.Flags().StringVar(&instructionsPath, "instructions", "", "a file whose text replaces the system prompt")
	cmd.Flags().StringVar(&match, "match", "in-order", "how calls find their recording: in-order or any-order")
	cmd.Flags().StringArrayVar(&live, "live", nil, "a tool to call for real (read_only tools only); repeat for more")
	cmd.Flags().StringVar(&forkAt, "fork-at", "", "replay each entry to this step from its recording, then run the candidate live from it")
	cmd.Flags().IntVar(&concurrency, "concurrency", 4, "how many entries replay at once")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcomes as JSON")
	return cmd
}

func printOutcomes(cmd *cobra.Command, outcomes []dataset.Outcome, asJSON bool) error {
	if asJSON {
		if err := printJSON(cmd.OutOrStdout(), outcomes); err != nil {
			return err
		}
	} else {
		dataset.PrintOutcomes(cmd.OutOrStdout(), outcomes)
	}
	for _, o := range outcomes {
		if !o.Passed {
			cmd.SilenceUsage = true
			return errChecksFailed
		}
	}
	return nil
}

// replayOptions reads the candidate changes replay and eval take.
func replayOptions(model, specPath, instructionsPath string) (agentsaga.ReplayOptions, error) {
	var opts agentsaga.ReplayOptions
	if model != "" {
		m, err := agentsaga.ParseModel(model)
		if err != nil {
			return opts, fmt.Errorf("--model: %w", err)
		}
		opts.Model = &m
	}
	if specPath != "" {
		spec, err := workflows.ReadSpec(specPath)
		if err != nil {
			return opts, fmt.Errorf("--spec: %w", err)
		}
		opts.Spec = &spec
	}
	if instructionsPath != "" {
		text, err := os.ReadFile(instructionsPath)
		if err != nil {
			return opts, fmt.Errorf("--instructions: %w", err)
		}
		opts.System = string(text)
	}
	return opts, nil
}

// evalDataset imports each line's entry as a recorded run, replays it
// through run, at most concurrency at once, and judges it; outcomes are in
// the file's order. An entry that cannot be replayed fails the eval. at,
// when not 0, is --fork-at.
func evalDataset(ctx context.Context, store *ledger.Store, path string, lines []dataset.Line, opts agentsaga.ReplayOptions,
	at, concurrency int, run dataset.StartRun) ([]dataset.Outcome, error) {
	outcomes := make([]dataset.Outcome, len(lines))
	errs := make([]error, len(lines))
	slots := make(chan struct{}, max(concurrency, 1))
	var wg sync.WaitGroup
	for i, line := range lines {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			outcomes[i], errs[i] = evalEntry(ctx, store, path, line, opts, at, run)
		})
	}
	wg.Wait()
	return outcomes, errors.Join(errs...)
}

func evalEntry(ctx context.Context, store *ledger.Store, path string, line dataset.Line, opts agentsaga.ReplayOptions,
	at int, run dataset.StartRun) (dataset.Outcome, error) {
	name := fmt.Sprintf("%s:%d", filepath.Base(path), line.N)
	source := dataset.SourceID(path, line.N, line.Entry)
	if _, err := dataset.Import(ctx, ledgerdb.Of(store), source, line.Entry); err != nil {
		return dataset.Outcome{}, fmt.Errorf("eval %s: %w", name, err)
	}
	if at != 0 {
		outcome, err := evalFork(ctx, store, name, source, line.Entry, opts, at, run)
		if err != nil {
			return dataset.Outcome{}, fmt.Errorf("eval %s: %w", name, err)
		}
		return outcome, nil
	}
	id, err := replay(ctx, store, source, opts, func(ctx context.Context, id string, spec workflows.RunSpec) error {
		return run(ctx, id, spec, false)
	})
	if err != nil {
		return dataset.Outcome{}, fmt.Errorf("eval %s: %w", name, err)
	}
	return dataset.Judge(ctx, ledgerdb.Of(store), name, line.Entry, source, id)
}

// evalFork runs the entry imported as source to step at from its
// recording and the candidate opts make from there (dataset.ForkAt), and
// judges the fork (named name in the outcome). The prefix takes the first
// free replay ID, the fork the same with "-fork".
func evalFork(ctx context.Context, store *ledger.Store, name, source string, e dataset.Entry, opts agentsaga.ReplayOptions,
	at int, run dataset.StartRun) (dataset.Outcome, error) {
	prefix, err := replayID(ctx, store, source)
	if err != nil {
		return dataset.Outcome{}, err
	}
	fork := prefix + "-fork"
	// The candidate starts mid-run: its calls from at on need not come in
	// the recording's order from its first call.
	opts.Match = agentsagatype.MatchAnyOrder
	candidate, err := agentsaga.ReplaySpec(ctx, store, source, fork, opts)
	if err != nil {
		return dataset.Outcome{}, err
	}
	if candidate, err = candidate.Resolve(); err != nil {
		return dataset.Outcome{}, fmt.Errorf("fork at step %d: the candidate's spec: %w", at, err)
	}
	before, err := dataset.ForkAt(ctx, ledgerdb.Of(store), source, e, at, candidate, prefix, fork, run)
	if err != nil {
		return dataset.Outcome{}, err
	}
	return dataset.JudgeFork(ctx, ledgerdb.Of(store), name, e, source, before, fork, at)
}
