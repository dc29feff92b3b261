package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// updateCommand sends one of the run's Updates and waits for it to be
// accepted; a rejected Update prints the validator's reason and changes
// nothing.
func updateCommand(use, short, name string, args func() []any, check func() error) *cobra.Command {
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
			handle, err := c.UpdateWorkflow(cmd.Context(), client.UpdateWorkflowOptions{
				WorkflowID: positional[0], UpdateName: name, Args: args(), WaitForStage: client.WorkflowUpdateStageCompleted,
			})
			if err != nil {
				return fmt.Errorf("%s %s: %w", name, positional[0], err)
			}
			var answer string
			if err := handle.Get(cmd.Context(), &answer); err != nil {
				return fmt.Errorf("%s %s: %w", name, positional[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", positional[0], answer)
			return nil
		},
	}
}

func resumeCommand() *cobra.Command {
	var in workflows.ResumeInput
	cmd := updateCommand("resume RUN_ID --message TEXT [--add-usd X] [--add-steps N]",
		"Resume an escalated run with an instruction the model reads next turn", workflows.UpdateResume,
		func() []any { return []any{in} },
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

func reasonCommand(use, short, name string) *cobra.Command {
	var in workflows.ReasonInput
	cmd := updateCommand(use, short, name, func() []any { return []any{in} }, func() error {
		if in.Reason == "" {
			return fmt.Errorf("%s: --reason is required (who decided, and why)", name)
		}
		return nil
	})
	cmd.Flags().StringVar(&in.Reason, "reason", "", "who decided, and why (required)")
	return cmd
}

func abortCommand() *cobra.Command {
	return reasonCommand("abort RUN_ID --reason TEXT",
		"Abort an escalated run (it compensates) or a stalled compensation", workflows.UpdateAbort)
}

func skipCommand() *cobra.Command {
	return reasonCommand("skip RUN_ID --reason TEXT",
		"Take responsibility for a compensation that keeps failing, and let the walk go on", workflows.UpdateSkip)
}

func retryCommand() *cobra.Command {
	return updateCommand("retry RUN_ID", "Run a failed compensation again", workflows.UpdateRetry,
		func() []any { return nil }, nil)
}
