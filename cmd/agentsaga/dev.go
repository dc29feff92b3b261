package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/migrations"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// devUIPort is where `agentsaga dev` serves the Temporal UI.
const devUIPort = "8233"

func devCommand() *cobra.Command {
	var temporalBin string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local stack until Ctrl-C: Temporal dev server with UI on 127.0.0.1:8233, migrations, a worker, the HTTP API on 127.0.0.1:8480 with a key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			stack, err := startDevStack(cmd.Context(), cmd.OutOrStdout(), temporalBin)
			if err != nil {
				return err
			}
			defer stack.Close()
			fmt.Fprintln(cmd.OutOrStdout(), "ready; Ctrl-C stops everything")
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().StringVar(&temporalBin, "temporal", "", "the Temporal CLI binary (default: bin/temporal beside this binary or in the working directory)")
	return cmd
}

// devStack is a dev server (started here, or found already running), the
// ledger and one worker.
type devStack struct {
	cfg    worker.Config
	client client.Client
	store  *ledger.Store
	worker sdkworker.Worker
	server *exec.Cmd
	// serverDone is closed when the dev server process has exited.
	serverDone chan struct{}
	// apiBase is where the stack's HTTP API serves (http://127.0.0.1:PORT),
	// and stopAPI stops it.
	apiBase string
	stopAPI func()
}

func startDevStack(ctx context.Context, out io.Writer, temporalBin string) (_ *devStack, err error) {
	// Every error path returns a nil stack; what it had started is closed
	// here, on this variable, not on the nil result.
	stack := &devStack{cfg: worker.ConfigFromEnv()}
	defer func() {
		if err != nil {
			stack.Close()
		}
	}()

	if err := ledger.EnsureDatabase(ctx, stack.cfg.DatabaseURL); err != nil {
		return nil, fmt.Errorf("%w\n(start Postgres with `make postgres`, or set DATABASE_URL)", err)
	}
	if _, err := migrations.Apply(ctx, stack.cfg.DatabaseURL); err != nil {
		return nil, err
	}
	if stack.store, err = ledger.Open(ctx, stack.cfg.DatabaseURL); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "postgres: ledger ready (%s)\n", redactURL(stack.cfg.DatabaseURL))

	if c, err := quickDial(ctx, stack.cfg); err == nil {
		stack.client = c
		fmt.Fprintf(out, "temporal: a server already answers at %s; using it\n", stack.cfg.TemporalAddress)
	} else {
		if err := stack.startTemporal(ctx, temporalBin); err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "temporal: dev server at %s, UI at http://127.0.0.1:%s (log in .dev/temporal.log)\n", stack.cfg.TemporalAddress, devUIPort)
	}

	if err := agentsaga.RegisterSearchAttributes(ctx, stack.client, stack.cfg.Namespace); err != nil {
		return nil, err
	}
	if stack.worker, err = worker.New(ctx, stack.client, stack.store, worker.Options{Config: agentsaga.Config{TaskQueue: stack.cfg.TaskQueue, ReconcileEvery: workflows.ReconcileInterval}}); err != nil {
		return nil, err
	}
	if err := stack.worker.Start(); err != nil {
		return nil, fmt.Errorf("worker: start: %w", err)
	}
	fmt.Fprintf(out, "worker: polling task queue %q\n", stack.cfg.TaskQueue)
	if err := stack.startAPI(ctx, out); err != nil {
		return nil, err
	}
	return stack, nil
}

// startAPI serves the HTTP API on loopback, at defaultAPIListen or, when
// that port is taken, at any free one, with a key of every scope made for
// this stack (the "dev" key of an earlier stack is revoked first).
func (s *devStack) startAPI(ctx context.Context, out io.Writer) error {
	listener, err := net.Listen("tcp", defaultAPIListen)
	if err != nil {
		if listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return fmt.Errorf("api: listen on loopback: %w", err)
		}
	}
	keys := apikeys.New(ledgerdb.Of(s.store).Pool())
	_ = keys.Revoke(ctx, devKeyName) // none yet is fine
	token, _, err := keys.Create(ctx, devKeyName, apikeys.Scopes, "")
	if err != nil {
		listener.Close()
		return err
	}
	apiCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() {
		done <- serveAPI(apiCtx, listener, s.client, s.store, s.cfg.Namespace, "", "", out)
	}()
	s.apiBase = "http://" + listener.Addr().String()
	s.stopAPI = func() { cancel(); <-done }
	fmt.Fprintf(out, "api: %s/v1 (docs/api.md), a run's live page at %s/runs/RUN_ID\n", s.apiBase, s.apiBase)
	fmt.Fprintf(out, "api: key %q with every scope, for this stack (the page asks for it): %s\n", devKeyName, token)
	return nil
}

// devKeyName names the API key `agentsaga dev` makes.
const devKeyName = "dev"

func quickDial(ctx context.Context, cfg worker.Config) (client.Client, error) {
	conn, err := net.DialTimeout("tcp", cfg.TemporalAddress, time.Second)
	if err != nil {
		return nil, err
	}
	conn.Close()
	return worker.Dial(ctx, cfg)
}

func (s *devStack) startTemporal(ctx context.Context, temporalBin string) error {
	bin, err := findTemporal(temporalBin)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(s.cfg.TemporalAddress)
	if err != nil {
		return fmt.Errorf("TEMPORAL_ADDRESS %q: %w", s.cfg.TemporalAddress, err)
	}
	if err := os.MkdirAll(".dev", 0o755); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(".dev", "temporal.log"))
	if err != nil {
		return err
	}
	args := []string{"server", "start-dev",
		"--ip", host, "--port", port, "--ui-ip", "127.0.0.1", "--ui-port", devUIPort,
		"--db-filename", filepath.Join(".dev", "temporal.db"),
		"--namespace", s.cfg.Namespace, "--log-level", "warn"}
	args = append(args, pausedWorkerKeepalive()...)
	s.server = exec.Command(bin, append(args, fairnessKeys()...)...)
	s.server.Stdout, s.server.Stderr = logFile, logFile
	s.server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.server.Start(); err != nil {
		return fmt.Errorf("temporal: start %s: %w", bin, err)
	}
	var exitErr error
	s.serverDone = make(chan struct{})
	go func() { exitErr = s.server.Wait(); close(s.serverDone) }()

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-s.serverDone:
			return fmt.Errorf("temporal: dev server exited (%v); see .dev/temporal.log", exitErr)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if c, err := quickDial(ctx, s.cfg); err == nil {
			s.client = c
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("temporal: dev server at %s did not answer within 60s: %w", s.cfg.TemporalAddress, err)
		}
	}
}

// findTemporal looks for the Temporal CLI beside this binary, then in
// ./bin, then on PATH.
func findTemporal(explicit string) (string, error) {
	if explicit != "" {
		return explicit, nil
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "temporal"))
	}
	candidates = append(candidates, filepath.Join("bin", "temporal"))
	for _, c := range candidates {
		if info, err := os.Stat(c); err == nil && !info.IsDir() {
			return c, nil
		}
	}
	if path, err := exec.LookPath("temporal"); err == nil {
		return path, nil
	}
	return "", errors.New("temporal: the Temporal CLI is not in bin/ nor on PATH; build it with `make bin/temporal`")
}

// Close stops the API and the worker, then the dev server if this stack
// started it.
func (s *devStack) Close() {
	if s.stopAPI != nil {
		s.stopAPI()
	}
	if s.worker != nil {
		s.worker.Stop()
	}
	if s.client != nil {
		s.client.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
	if s.serverDone != nil {
		_ = syscall.Kill(-s.server.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.serverDone:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-s.server.Process.Pid, syscall.SIGKILL)
		}
	}
}

func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable DATABASE_URL)"
}

// pausedWorkerKeepalive are the Temporal server settings that let a paused
// worker's tasks go elsewhere: the frontend pings every connection every
// second and drops one that does not answer within a second. A SIGSTOPped
// worker's long polls look alive to TCP (its kernel still answers), so
// without them the server goes on handing it retries, each lost for a whole
// heartbeat timeout (the chaos harness measured 22-37 s takeovers). The two
// must add up to less than the shortest heartbeat timeout (3 s for a tool
// with a 3 s timeout): at 2 s each, a 3 s tool's retry still went to the
// paused worker and takeover took 9 s. Production servers want the same
// dynamic config.
func pausedWorkerKeepalive() []string {
	return []string{
		"--dynamic-config-value", `frontend.keepAliveTime="1s"`,
		"--dynamic-config-value", `frontend.keepAliveTimeout="1s"`,
	}
}

// fairnessKeys turn on the task queue priority and fairness that the 1.29
// server keeps behind dynamic config, so that the fairness key Start gives
// every run (its account) is honoured: one account's backlog then does not
// hold back another account's first turn (agentsaga bench fairness:
// 101x the idle time to first turn first come first served, 2.8x with
// them). deploy/temporal/dynamicconfig.yaml sets the same values
// (TestComposeDynamicConfigFairness).
func fairnessKeys() []string {
	return []string{
		"--dynamic-config-value", "matching.useNewMatcher=true",
		"--dynamic-config-value", "matching.enableFairness=true",
	}
}
