package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

func replayCommand() *cobra.Command {
	var model, specPath, instructionsPath, match string
	var live []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "replay RUN_ID [--model provider:name] [--spec FILE] [--instructions FILE] [--match in-order|any-order] [--live TOOL]... [--json]",
		Short: "Run a recorded run's goal again, every tool answered from its ledger, and compare",
		Long: `replay starts a real run on the workers, under the ID replay-RUN_ID-N, with the recorded
run's goal and spec, changed by --model, --spec or --instructions. Every tool that --live does
not name is answered from the recorded run's ledger, matched by tool and arguments: the
worker gets no URL, server or command for it, so nothing is sent to the world. A call the
recording holds no answer for fails with "not recorded in RUN_ID", which the model reads.
Then it prints the recorded run and the replay side by side.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := replayOptions(model, specPath, instructionsPath)
			if err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			opts.Match, opts.Live = match, live
			cfg, c, store, closeAll, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer closeAll()
			out := cmd.OutOrStdout()
			id, err := replay(cmd.Context(), store, args[0], opts, func(ctx context.Context, id string, spec workflows.RunSpec) error {
				if !asJSON {
					fmt.Fprintf(out, "replaying %s as %s (%s; live: %v)\n", args[0], id, match, live)
				}
				return startAndAwait(ctx, c, store, cfg.Namespace, id, spec)
			})
			if err != nil {
				return err
			}
			return printReplay(cmd.Context(), out, store, id, asJSON)
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "the candidate model, provider:name (openai:gpt-4o-mini)")
	cmd.Flags().StringVar(&specPath, "spec", "", "the candidate spec: its model, tools, budget and instructions; the goal stays the recording's")
	cmd.Flags().StringVar(&instructionsPath, "instructions", "", "a file whose text replaces the system prompt")
	cmd.Flags().StringVar(&match, "match", "in-order", "how calls find their recording: in-order or any-order")
	cmd.Flags().StringArrayVar(&live, "live", nil, "a tool to call for real (read_only tools only); repeat for more")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// replay runs the recorded run source again through run, under the
// first free replay-SOURCE-N, with opts' changes, and returns that ID.
func replay(ctx context.Context, store *ledger.Store, source string, opts agentsaga.ReplayOptions, run runReplay) (string, error) {
	id, err := replayID(ctx, store, source)
	if err != nil {
		return "", err
	}
	spec, err := agentsaga.ReplaySpec(ctx, store, source, id, opts)
	if err != nil {
		return "", err
	}
	if err := run(ctx, id, spec); err != nil {
		return "", fmt.Errorf("replay %s: %w", id, err)
	}
	return id, nil
}

// runReplay starts spec under id as a run and waits for it to end.
type runReplay func(ctx context.Context, id string, spec workflows.RunSpec) error

// startAndAwait is runReplay on the workers.
func startAndAwait(ctx context.Context, c client.Client, store *ledger.Store, namespace, id string, spec workflows.RunSpec) error {
	run, err := startRun(ctx, c, store, namespace, id, spec, "", 0)
	if err != nil {
		return err
	}
	_, err = awaitRun(ctx, run)
	return err
}

// replayID is the first replay-SOURCE-N the ledger has no run for.
func replayID(ctx context.Context, store *ledger.Store, source string) (string, error) {
	for n := 1; ; n++ {
		id := fmt.Sprintf("replay-%s-%d", source, n)
		_, err := ledgerdb.Of(store).GetRun(ctx, id)
		if errors.Is(err, ledgerdb.ErrNotFound) {
			return id, nil
		}
		if err != nil {
			return "", fmt.Errorf("replay: choose an ID: %w", err)
		}
	}
}

// printReplay prints replay id against its recording, as a table or as
// JSON.
func printReplay(ctx context.Context, out io.Writer, store *ledger.Store, id string, asJSON bool) error {
	report, err := agentsaga.ReportReplay(ctx, store, id)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, report)
	}
	report.Print(out)
	return nil
}
