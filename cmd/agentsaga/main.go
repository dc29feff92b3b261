// Command agentsaga is the one binary: it runs workers, starts and inspects
// runs, applies migrations, and brings up a local dev stack with a demo.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := stopOnSignals(os.Stderr)
	stopProfile := startCPUProfile(os.Stderr)
	err := rootCommand().ExecuteContext(ctx)
	stopProfile()
	stop()
	if err != nil {
		// The facade's errors already begin with the package's name.
		fmt.Fprintln(os.Stderr, "agentsaga:", strings.TrimPrefix(err.Error(), "agentsaga: "))
		os.Exit(1)
	}
}

// stopOnSignals ends the returned context at the first SIGINT or SIGTERM,
// so a worker drains (it lets the calls in flight finish, see
// worker.Config.StopTimeout), and exits the process at the second: an
// operator who asks twice does not want to wait.
func stopOnSignals(stderr io.Writer) (context.Context, func()) {
	return stopOnSignalsExiting(stderr, os.Exit)
}

// stopOnSignalsExiting is stopOnSignals with the exit a test replaces.
func stopOnSignalsExiting(stderr io.Writer, exit func(code int)) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-signals:
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-signals:
			fmt.Fprintf(stderr, "agentsaga: %s again: stopping now, without waiting for the calls in flight\n", sig)
			exit(1)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(signals)
		close(done)
		cancel()
	}
}
func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "agentsaga",
		Short: "A durable engine for long-running LLM agent runs on Temporal and Postgres",
		Long: `agentsaga runs LLM agents as Temporal workflows. Model and tool calls are activities with
idempotency keys; everything done to the outside world is written to an action ledger in Postgres.

Temporal: the connection is read as the temporal CLI reads it: the temporal.toml profile
(--profile or TEMPORAL_PROFILE; the file is TEMPORAL_CONFIG_FILE or ~/.config/temporalio/temporal.toml),
then TEMPORAL_ADDRESS (default 127.0.0.1:7233), TEMPORAL_NAMESPACE (default "default"),
TEMPORAL_API_KEY, TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH,
TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_NAME and the other TEMPORAL_* variables.
TEMPORAL_UI is the web UI's base URL for the printed links (default: Temporal Cloud's for a Cloud
address, http://127.0.0.1:8233 for the local dev server, none otherwise).
Postgres: DATABASE_URL (default postgres://postgres@127.0.0.1:5432/agentsaga); TLS as pgx reads it
(sslmode=verify-full&sslrootcert=/path/ca.pem, sslcert, sslkey).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var profile, configFile string
	root.PersistentFlags().StringVar(&profile, "profile", "", "the temporal.toml profile to connect with (env TEMPORAL_PROFILE; default \"default\")")
	root.PersistentFlags().StringVar(&configFile, "config-file", "", "the temporal.toml file (env TEMPORAL_CONFIG_FILE; default ~/.config/temporalio/temporal.toml)")
	// Every command reads the connection through worker.ConfigFromEnv and
	// worker.Dial, as do the processes it starts: the flags become the
	// variables envconfig reads, so all of them see the same profile.
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		for flag, variable := range map[string]string{"profile": "TEMPORAL_PROFILE", "config-file": "TEMPORAL_CONFIG_FILE"} {
			if f := cmd.Flags().Lookup(flag); f != nil && f.Changed {
				if err := os.Setenv(variable, f.Value.String()); err != nil {
					return fmt.Errorf("--%s: %w", flag, err)
				}
			}
		}
		return nil
	}
	root.AddCommand(workerCommand(), pruneCommand(), runCommand(), showCommand(), resumeCommand(), abortCommand(), retryCommand(),
		skipCommand(), approvalsCommand(), approveCommand(), denyCommand(), spendCommand(), queueCommand(), keysCommand(), webhooksCommand(), watchCommand(), serveCommand(), migrateCommand(), devCommand(), demoCommand(), benchCommand(),
		replayCommand(), forkCommand(), datasetCommand(), evalCommand(), modelsCommand())
	return root
}
