package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/worker"
)

// updateCommand sends one of the run's decisions through the Run handle
// (agentsaga.Run.Resume and the like) and waits for it to be accepted; a
// refused decision prints the run's reason and changes nothing.
func updateCommand(use, short string, decide func(ctx context.Context, run *agentsaga.Run) error, check func() error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, positional []string) error {
			if check != nil {
				if err := check(); err != nil {
					return err
				}
			}
			c, err := worker.Dial(cmd.Context(), worker.ConfigFromEnv())
			if err != nil {
				return err
			}
			defer c.Close()
			if err := decide(cmd.Context(), agentsaga.Get(c, positional[0])); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: accepted: %s\n", positional[0], strings.Fields(use)[0])
			return nil
		},
	}
}

func resumeCommand() *cobra.Command {
	var in agentsaga.ResumeInput
	cmd := updateCommand("resume RUN_ID --message TEXT [--add-usd X] [--add-steps N]",
		"Resume an escalated run with an instruction the model reads next turn",
		func(ctx context.Context, run *agentsaga.Run) error { return run.Resume(ctx, in) },
		func() error {
			if in.Message == "" {
				return fmt.Errorf("resume: --message is required: the instruction the model reads next turn")
			}
			return nil
		})
	cmd.Flags().StringVar(&in.Message, "message", "", "the instruction for the model (required)")
	cmd.Flags().Float64Var(&in.AddUSD, "add-usd", 0, "USD to add to the run's budget")
	cmd.Flags().IntVar(&in.AddSteps, "add-steps", 0, "steps to add to the run's budget")
	return cmd
}

// reasonCommand is a decision that takes a reason: (*agentsaga.Run).Abort
// or Skip.
func reasonCommand(use, short string, decide func(run *agentsaga.Run, ctx context.Context, reason string) error) *cobra.Command {
	var reason string
	name := strings.Fields(use)[0]
	cmd := updateCommand(use, short, func(ctx context.Context, run *agentsaga.Run) error { return decide(run, ctx, reason) }, func() error {
		if reason == "" {
			return fmt.Errorf("%s: --reason is required (who decided, and why)", name)
		}
		return nil
	})
	cmd.Flags().StringVar(&reason, "reason", "", "who decided, and why (required)")
	return cmd
}

func abortCommand() *cobra.Command {
	return reasonCommand("abort RUN_ID --reason TEXT",
		"Abort an escalated run (it compensates) or a stalled compensation", (*agentsaga.Run).Abort)
}

func skipCommand() *cobra.Command {
	return reasonCommand("skip RUN_ID --reason TEXT",
		"Take responsibility for a compensation that keeps failing, and let the walk go on", (*agentsaga.Run).Skip)
}

func retryCommand() *cobra.Command {
	return updateCommand("retry RUN_ID", "Run a failed compensation again",
		func(ctx context.Context, run *agentsaga.Run) error { return run.Retry(ctx) }, nil)
}
