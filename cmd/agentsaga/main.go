// Command agentsaga is the one binary: it runs workers, starts and inspects
// runs, applies migrations, and brings up a local dev stack with a demo.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agentsaga:", err)
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "agentsaga",
		Short: "A durable engine for long-running LLM agent runs on Temporal and Postgres",
		Long: `agentsaga runs LLM agents as Temporal workflows. Model and tool calls are activities with
idempotency keys; everything done to the outside world is written to an action ledger in Postgres.

Environment: TEMPORAL_ADDRESS (default 127.0.0.1:7233), TEMPORAL_NAMESPACE (default "default"),
DATABASE_URL (default postgres://postgres@127.0.0.1:5432/agentsaga), TEMPORAL_UI (default http://127.0.0.1:8233).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(workerCommand(), pruneCommand(), runCommand(), showCommand(), resumeCommand(), abortCommand(), retryCommand(),
		skipCommand(), migrateCommand(), devCommand(), demoCommand(), benchCommand())
	return root
}
