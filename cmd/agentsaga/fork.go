package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

func forkCommand() *cobra.Command {
	var at, model, specPath, message, id, account string
	cmd := &cobra.Command{
		Use:   "fork RUN_ID --at STEP|failed [--spec FILE | --model PROVIDER:NAME] [--message TEXT] [--id NEW] [--account PATH]",
		Short: "Fork a run from a step: the steps before it answered from its ledger, its effects moved to the fork",
		Long: `fork starts a new run (RUN_ID-fork, or --id) that begins with RUN_ID's conversation up to step
STEP (--at failed: the step at which it failed or escalated), plus --message, and goes on live
from STEP with --spec's spec or --model's model. The steps before STEP make no model call, no
tool call and no spend. The effects RUN_ID made before STEP move to the fork in one ledger
transaction: the fork's compensation covers them, RUN_ID's no longer does, and RUN_ID can no
longer act. A running RUN_ID is first stopped at its next step boundary. A sub-agent, a run
compensated or being compensated, and a run already forked are refused, saying why.
See docs/forks.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if at == "" {
				return fmt.Errorf("fork: --at is required: a step number, or failed")
			}
			if specPath != "" && model != "" {
				return fmt.Errorf("fork: --spec and --model: name one (a spec names its model)")
			}
			step, err := agentsaga.ParseForkAt(at)
			if err != nil {
				return fmt.Errorf("fork: --%w", err)
			}
			changes, err := replayOptions(model, specPath, "")
			if err != nil {
				return fmt.Errorf("fork: %w", err)
			}
			cfg, c, store, closeAll, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer closeAll()
			fork, err := agentsaga.Get(c, args[0]).WithLedger(store).Fork(cmd.Context(), agentsaga.ForkOptions{At: step,
				Spec: changes.Spec, Model: changes.Model, Message: message, ID: id, Start: agentsaga.StartOptions{Namespace: cfg.Namespace, Account: account}})
			if err != nil {
				return err
			}
			row, err := ledgerdb.Of(store).GetRun(cmd.Context(), fork.ID)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "forked %s at step %d into %s (agentsaga show %s)\n", args[0], row.ForkedAtStep, fork.ID, fork.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "the step the fork makes live first, or failed (required)")
	cmd.Flags().StringVar(&specPath, "spec", "", "the fork's spec from STEP on; the goal stays the run's")
	cmd.Flags().StringVar(&model, "model", "", "the fork's model, provider:name (openai:gpt-4o-mini)")
	cmd.Flags().StringVar(&message, "message", "", "an instruction the model reads at STEP, after the run's conversation")
	cmd.Flags().StringVar(&id, "id", "", "the fork's run ID (default RUN_ID-fork)")
	cmd.Flags().StringVar(&account, "account", "", "the account the fork is charged to (default RUN_ID's)")
	return cmd
}
