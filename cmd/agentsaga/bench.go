package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga/bench"
)

func benchCommand() *cobra.Command {
	var temporalBin string
	var asJSON bool
	var chart string
	cfg := bench.DefaultAmplification
	cmd := &cobra.Command{
		Use:   "bench amplification|success|overhead|storm|ledger [--json] [--chart FILE.png] [--runs R --calls C --workers W]",
		Short: "Run a benchmark scenario on a real dev server and Postgres, beside its baselines, and print the figures",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch args[0] {
			case "amplification", "success", "overhead", "storm", "ledger":
			default:
				return fmt.Errorf("bench: unknown scenario %q (the scenarios are: amplification, success, overhead, storm, ledger)", args[0])
			}
			if cfg.Runs < 1 || cfg.Calls < 1 || cfg.Workers < 1 {
				return fmt.Errorf("bench: --runs %d, --calls %d and --workers %d must be positive", cfg.Runs, cfg.Calls, cfg.Workers)
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			progress := out
			if asJSON {
				progress = cmd.ErrOrStderr()
			}
			stack, err := startDevStack(ctx, progress, temporalBin)
			if err != nil {
				return err
			}
			defer stack.Close()
			if args[0] == "ledger" {
				rows, err := bench.Ledger(ctx, stack.cfg.DatabaseURL, 8, 10*time.Second)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(out).Encode(map[string]any{"scenario": "ledger", "rows": rows})
				}
				bench.PrintLedger(out, "\nledger: idempotent action writes beside pgbench, 8 clients, 10 s each", rows)
				return nil
			}
			if args[0] == "storm" {
				rows, err := bench.Storm(ctx, stack.client, stack.cfg.DatabaseURL, bench.DefaultStorm)
				if err != nil {
					return err
				}
				if chart != "" {
					if err := bench.StormChart(chart, bench.DefaultStorm, rows); err != nil {
						return err
					}
					fmt.Fprintf(progress, "chart: %s\n", chart)
				}
				if asJSON {
					return json.NewEncoder(out).Encode(map[string]any{"scenario": "storm", "config": bench.DefaultStorm, "rows": rows})
				}
				bench.PrintStorm(out, "\nstorm: a capacity-limited downstream with an outage", bench.DefaultStorm, rows)
				return nil
			}
			if args[0] == "overhead" {
				rows, err := bench.Overhead(ctx, stack.client, stack.cfg.DatabaseURL, cfg)
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(out).Encode(map[string]any{"scenario": "overhead", "config": cfg, "rows": rows})
				}
				bench.PrintOverhead(out, fmt.Sprintf("\noverhead: %d runs x %d sequential calls to a healthy downstream, side by side", cfg.Runs, cfg.Calls), rows)
				return nil
			}
			if args[0] == "success" {
				rows, err := bench.Success(ctx, stack.client, stack.cfg.DatabaseURL, cfg, []float64{0.05, 0.20})
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(out).Encode(map[string]any{"scenario": "success", "config": cfg, "rows": rows})
				}
				bench.PrintSuccess(out, fmt.Sprintf("\nsuccess: independent failures, %d runs x %d tool calls on %d workers, 3 attempts per call", cfg.Runs, cfg.Calls, cfg.Workers), rows)
				return nil
			}
			rows, err := bench.Amplification(ctx, stack.client, stack.cfg.DatabaseURL, cfg)
			if err != nil {
				return err
			}
			if chart != "" {
				if err := bench.AmplificationChart(chart, rows); err != nil {
					return err
				}
				fmt.Fprintf(progress, "chart: %s\n", chart)
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"scenario": "amplification", "config": cfg, "rows": rows})
			}
			bench.PrintRows(out, fmt.Sprintf("\namplification: a 100%% outage, %d runs x %d tool calls on %d workers", cfg.Runs, cfg.Calls, cfg.Workers), rows)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&chart, "chart", "", "also write a PNG chart to this file (amplification and storm only)")
	cmd.Flags().IntVar(&cfg.Runs, "runs", cfg.Runs, "concurrent runs per contender")
	cmd.Flags().IntVar(&cfg.Calls, "calls", cfg.Calls, "tool calls per run")
	cmd.Flags().IntVar(&cfg.Workers, "workers", cfg.Workers, "workers per contender, each with its own Postgres pool")
	cmd.Flags().StringVar(&temporalBin, "temporal", "", "the Temporal CLI binary (default: bin/temporal)")
	return cmd
}
