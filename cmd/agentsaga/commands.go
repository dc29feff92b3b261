package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/migrations"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

func workerCommand() *cobra.Command {
	// The flags' defaults are the environment's; the connection itself is
	// read again once the flags are parsed, so --profile counts.
	flags := worker.ConfigFromEnv()
	cmd := &cobra.Command{
		Use:   "worker [--metrics-addr HOST:PORT] [--stop-timeout D] [--deployment NAME --build-id ID [--versioning auto-upgrade|pinned]]",
		Short: "Run a worker (reads the temporal.toml profile, the TEMPORAL_* variables and DATABASE_URL)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("stop-timeout") {
				if _, err := worker.StopTimeoutFromEnv(); err != nil {
					return err
				}
			}
			if flags.StopTimeout < 0 {
				return fmt.Errorf("worker: --stop-timeout %s: give a duration of zero or more", flags.StopTimeout)
			}
			cfg := worker.ConfigFromEnv()
			cfg.MetricsAddr, cfg.Retention, cfg.StopTimeout, cfg.Deployment = flags.MetricsAddr, flags.Retention, flags.StopTimeout, flags.Deployment
			return worker.Run(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&flags.MetricsAddr, "metrics-addr", flags.MetricsAddr,
		"serve Prometheus metrics (agentsaga's and the Temporal SDK's) at http://HOST:PORT/metrics, and the probes /healthz (up) and /readyz (connected to Temporal and Postgres, schema current) (env AGENTSAGA_METRICS_ADDR)")
	cmd.Flags().DurationVar(&flags.Retention, "retention", 0,
		"keep a finished run's ledger rows this long (default 720h: 30 days); the worker prunes hourly, one worker of the fleet at a time; negative turns it off")
	cmd.Flags().DurationVar(&flags.StopTimeout, "stop-timeout", flags.StopTimeout,
		"on SIGTERM, stop polling and let the calls in flight finish for up to this long before cancelling them; a second SIGTERM stops at once (env AGENTSAGA_STOP_TIMEOUT)")
	cmd.Flags().StringVar(&flags.Deployment.Name, "deployment", flags.Deployment.Name,
		"run as a build of this Temporal worker deployment (Worker Versioning; env AGENTSAGA_DEPLOYMENT); needs --build-id")
	cmd.Flags().StringVar(&flags.Deployment.BuildID, "build-id", flags.Deployment.BuildID,
		"this worker's build ID within --deployment (env AGENTSAGA_BUILD_ID)")
	cmd.Flags().StringVar(&flags.Deployment.Versioning, "versioning", flags.Deployment.Versioning,
		"what runs this build starts do at a deploy: auto-upgrade (move to the current build; the default) or pinned (stay on this build) (env AGENTSAGA_VERSIONING)")
	return cmd
}

func pruneCommand() *cobra.Command {
	var olderThan, chargesOlderThan time.Duration
	cmd := &cobra.Command{
		Use:   "prune --older-than DURATION [--charges-older-than DURATION]",
		Short: "Delete finished runs' ledger rows older than DURATION (runs needing a human are kept) and old retry charges",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if olderThan <= 0 {
				return fmt.Errorf("prune: --older-than %s: give a positive duration, such as 720h", olderThan)
			}
			if chargesOlderThan <= 0 {
				return fmt.Errorf("prune: --charges-older-than %s: give a positive duration, such as 24h", chargesOlderThan)
			}
			cfg := worker.ConfigFromEnv()
			store, err := ledgerdb.Open(cmd.Context(), cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			now := time.Now()
			report, err := store.Prune(cmd.Context(), ledgerdb.PruneOptions{
				RunsFinishedBefore: now.Add(-olderThan), ChargesBefore: now.Add(-chargesOlderThan)})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pruned %d finished runs (older than %s) and %d retry charges (older than %s)\n",
				report.Runs, olderThan, report.Charges, chargesOlderThan)
			return nil
		},
	}
	cmd.Flags().DurationVar(&olderThan, "older-than", 0, "delete runs that finished longer ago than this (e.g. 720h)")
	cmd.Flags().DurationVar(&chargesOlderThan, "charges-older-than", ledgerdb.DefaultChargeRetention, "delete retry charges older than this")
	return cmd
}

func migrateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply the ledger's migrations to DATABASE_URL",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := worker.ConfigFromEnv()
			if err := ledger.EnsureDatabase(cmd.Context(), cfg.DatabaseURL); err != nil {
				return err
			}
			applied, err := migrations.Apply(cmd.Context(), cfg.DatabaseURL)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "schema is current; nothing to apply")
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "applied migrations %v\n", applied)
			}
			return nil
		},
	}
}

func runCommand() *cobra.Command {
	var specPath, id, account string
	var priority int
	var wait, asJSON bool
	cmd := &cobra.Command{
		Use:   "run --spec FILE [--account A] [--priority 1-5] [--wait] [--json]",
		Short: "Start a run from a spec file; with --wait, print its result",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("priority") && (priority < 1 || priority > ledgerdb.MaxPriority) {
				return fmt.Errorf("run: --priority %d: give 1 (first in the admission queue) to %d (last)", priority, ledgerdb.MaxPriority)
			}
			spec, err := workflows.ReadSpec(specPath)
			if err != nil {
				return err
			}
			// The ledger remembers every ID a run has had, after Temporal
			// forgot it (a restart, the retention): Start asks it first.
			cfg, c, store, closeAll, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer closeAll()
			if id == "" {
				id = newRunID()
			}
			run, err := startRun(cmd.Context(), c, store, cfg.Namespace, id, spec, account, priority)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(out, "started run %s\n", id)
				if link := uiLink(cfg.TemporalAddress, cfg.Namespace, id); link != "" {
					fmt.Fprintf(out, "UI: %s\n", link)
				}
			}
			if !wait {
				if asJSON {
					return json.NewEncoder(out).Encode(map[string]string{"workflow_id": id, "run_id": run.RunID})
				}
				return nil
			}
			var stopProgress func()
			if !asJSON {
				stopProgress = followRun(cmd.Context(), out, c, id)
			}
			result, err := awaitRun(cmd.Context(), run)
			if stopProgress != nil {
				stopProgress()
			}
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(out, result)
			}
			printResult(out, result)
			return nil
		},
	}
	cmd.Flags().StringVar(&specPath, "spec", "", "the run spec, YAML or JSON (required)")
	cmd.Flags().StringVar(&id, "id", "", "the run's workflow ID (default: a new run-<random> ID)")
	cmd.Flags().StringVar(&account, "account", "", "charge the run to this account (acme/support): its spend caps bound every model turn")
	cmd.Flags().IntVar(&priority, "priority", 0, "the run's place among priorities in its account's admission queue, and on Temporal's task queues: 1 goes first, 5 last (default: the spec's priority, or 3)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the run to end and print its result")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	_ = cmd.MarkFlagRequired("spec")
	return cmd
}

// followRun prints a run's progress as it happens, one line a turn: the
// step, the budget left and what the turn's tool calls returned. It reads
// the run's trace query, so it needs a live worker; it stops when told to.
func followRun(ctx context.Context, out io.Writer, c client.Client, id string) (stop func()) {
	stopping := make(chan struct{})
	done := make(chan struct{})
	printed := 0
	poll := func(ctx context.Context) {
		value, err := c.QueryWorkflow(ctx, id, "", workflows.QueryTrace)
		if err != nil {
			return
		}
		var trace []workflows.TraceEntry
		if value.Get(&trace) != nil {
			return
		}
		for ; printed < len(trace); printed++ {
			fmt.Fprintln(out, progressLine(trace[printed]))
		}
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-stopping:
				// One last look, so a run that ended between two polls is
				// shown whole.
				final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				poll(final)
				return
			case <-time.After(300 * time.Millisecond):
				poll(ctx)
			}
		}
	}()
	return func() { close(stopping); <-done }
}

func progressLine(e workflows.TraceEntry) string {
	switch e.Kind {
	case "model":
		budgetLeft := e.Note
		if line, _, ok := strings.Cut(e.Note, "\n"); ok {
			budgetLeft = line
		}
		return fmt.Sprintf("turn %-3d %s", e.Step, budgetLeft)
	default:
		result := "=> " + oneLine(e.Output, 80)
		if e.Error != "" {
			result = "=> error: " + oneLine(e.Error, 80)
		}
		return fmt.Sprintf("         %s %s %s %s", e.Kind, e.Tool, oneLine(e.Arguments, 50), result)
	}
}

func newRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "run-" + hex.EncodeToString(b)
}

// startRun starts a run the safe way (agentsaga.Start: validated, its
// defaults written out, an ID Temporal or the ledger has refused), charged
// to account ("" for the spec's) at priority (0 for the spec's): what
// `agentsaga run`, the demo and `agentsaga serve`'s POST /v1/runs start
// runs with.
func startRun(ctx context.Context, c client.Client, store *ledger.Store, namespace, id string, spec workflows.RunSpec, account string,
	priority int) (*agentsaga.Run, error) {
	return agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{Namespace: namespace, Ledger: store, Account: account, Priority: priority})
}

// awaitRun waits for the run's result. A run that ended failed still has a
// result, and that is what the user wants to see.
func awaitRun(ctx context.Context, run *agentsaga.Run) (workflows.RunResult, error) {
	result, err := run.Result(ctx)
	var failed *agentsaga.RunFailedError
	if errors.As(err, &failed) {
		return failed.Result, nil
	}
	return result, err
}

// uiLink is the run's page in the Temporal web UI, or "" when where the UI
// is cannot be known: TEMPORAL_UI when set; Temporal Cloud's UI for a
// Cloud address (<namespace>.<account>.tmprl.cloud:7233 or a regional
// <region>.<cloud>.api.temporal.io:7233 endpoint); the dev server's UI
// (what `agentsaga dev` starts) only for the dev server's own address. A
// cluster's UI lives wherever its operators put it, so a link guessed from
// its address would be wrong.
func uiLink(address, namespace, workflowID string) string {
	base := strings.TrimRight(os.Getenv("TEMPORAL_UI"), "/")
	if base == "" {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			host = address
		}
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		switch {
		case strings.HasSuffix(host, ".tmprl.cloud") || strings.HasSuffix(host, ".api.temporal.io"):
			base = "https://cloud.temporal.io"
		case address == worker.DefaultTemporalAddress || address == "localhost:7233":
			base = "http://127.0.0.1:" + devUIPort
		default:
			return ""
		}
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", base, url.PathEscape(namespace), url.PathEscape(workflowID))
}

func printResult(out io.Writer, r workflows.RunResult) {
	fmt.Fprintf(out, "status: %s (%s)\n", r.Status, r.Reason)
	if r.Answer != "" {
		fmt.Fprintf(out, "answer: %s\n", r.Answer)
	}
	if r.HandoffNote != "" {
		fmt.Fprintf(out, "handoff note: %s\n", r.HandoffNote)
	}
	fmt.Fprintf(out, "used: %d steps, %d leaf calls, %d tokens, %.4f USD\n", r.Usage.Steps, r.Usage.LeafCalls, r.Usage.Tokens, r.Usage.USD)
	fmt.Fprintf(out, "retries: %d over %d calls %s, amplification %.2f", r.Retries.Retries, r.Retries.Calls, perTool(r.Retries.ToolRetries), r.Retries.Amplification)
	if len(r.Retries.Denials) > 0 {
		fmt.Fprintf(out, ", denied: %v", r.Retries.Denials)
	}
	fmt.Fprint(out, "\n\ntrace:\n")
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	for _, e := range r.Trace {
		what := e.Output
		if e.Kind == "tool" {
			what = e.Tool + " " + e.Arguments + " => " + e.Output
		}
		if e.Error != "" {
			what += " failed: " + e.Error
		}
		if e.Replayed {
			what += " (from ledger)"
		}
		if e.Attempts > 1 {
			what += fmt.Sprintf(" [%d attempts]", e.Attempts)
		}
		fmt.Fprintf(tw, "  step %d\t%s\t%s\t%s\n", e.Step, e.Kind, e.ActivityID, oneLine(what, 160))
	}
	tw.Flush()
}

func showCommand() *cobra.Command {
	var asJSON bool
	page := conversationPage{From: -1, Limit: 10}
	cmd := &cobra.Command{
		Use:   "show RUN_ID [--json] [--from SEQ] [--limit N]",
		Short: "Show a run's status, answer, steps, actions and conversation from the ledger",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if page.Limit < 1 || page.From < -1 {
				return fmt.Errorf("show: --limit %d must be positive and --from %d not negative", page.Limit, page.From)
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			if asJSON {
				// One JSON document: the run's, with the page of its conversation.
				return showRunJSON(cmd.Context(), cmd.OutOrStdout(), store, args[0], page)
			}
			if err := showRun(cmd.Context(), cmd.OutOrStdout(), store, args[0], false); err != nil {
				return err
			}
			return showConversation(cmd.Context(), cmd.OutOrStdout(), store, args[0], page)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&page.From, "from", page.From, "the conversation from this message on (default: its last --limit messages)")
	cmd.Flags().IntVar(&page.Limit, "limit", page.Limit, "how many of the conversation's messages to show")
	return cmd
}

// conversationPage is which messages of a run's conversation show prints.
type conversationPage struct{ From, Limit int }

// showConversation prints a page of the run's conversation from the
// ledger: the whole run, however many times it continued as new.
func showConversation(ctx context.Context, out io.Writer, store *ledgerdb.Store, id string, page conversationPage) error {
	msgs, total, err := store.ConversationPage(ctx, id, page.From, page.Limit, 160)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		fmt.Fprintf(out, "\nconversation: %d messages\n", total)
		return nil
	}
	fmt.Fprintf(out, "\nconversation, messages %d-%d of %d (--from and --limit page through it):\n", msgs[0].Seq, msgs[len(msgs)-1].Seq, total)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SEQ\tROLE\tBYTES\tKEY\tCONTENT")
	for _, m := range msgs {
		content := m.Content
		if len(m.ToolCalls) > 0 {
			content += " -> " + string(m.ToolCalls)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\t%s\n", m.Seq, m.Role, m.Bytes, m.SourceKey, oneLine(content, 100))
	}
	return tw.Flush()
}

// showRunJSON is show --json: what showRun prints, and a page of the
// conversation, as one document.
func showRunJSON(ctx context.Context, out io.Writer, store *ledgerdb.Store, id string, page conversationPage) error {
	var doc map[string]any
	var buf strings.Builder
	if err := showRun(ctx, &buf, store, id, true); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(buf.String()), &doc); err != nil {
		return fmt.Errorf("show: %w", err)
	}
	msgs, total, err := store.ConversationPage(ctx, id, page.From, page.Limit, 160)
	if err != nil {
		return err
	}
	doc["conversation"], doc["messages"] = msgs, total
	return printJSON(out, doc)
}

func showRun(ctx context.Context, out io.Writer, store *ledgerdb.Store, id string, asJSON bool) error {
	run, err := store.GetRun(ctx, id)
	if err != nil {
		return err
	}
	actions, err := store.ListActions(ctx, id)
	if err != nil {
		return err
	}
	leaves, err := store.ListLeafCalls(ctx, id)
	if err != nil {
		return err
	}
	counters, err := store.RunLiveCounters(ctx, id)
	if err != nil {
		return err
	}
	quotas, err := runQuotas(ctx, store, run.Spec)
	if err != nil {
		return err
	}
	approvals, err := store.RunApprovals(ctx, id)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		stack, err := store.CompensationStack(ctx, id)
		if err != nil {
			return err
		}
		views := make([]quotaView, len(quotas))
		for i, q := range quotas {
			views[i] = newQuotaView(q)
		}
		return enc.Encode(map[string]any{"run": run, "counters": counters, "actions": actions, "leaf_calls": leaves,
			"compensations": stack, "quotas": views, "approvals": approvals})
	}
	fmt.Fprintf(out, "run %s: %s", run.WorkflowID, run.Status)
	if run.Reason != "" {
		fmt.Fprintf(out, " (%s)", run.Reason)
	}
	fmt.Fprintf(out, "\ngoal: %s\n", run.Goal)
	if run.ForkedFrom != "" {
		fmt.Fprintf(out, "forked from: %s at step %d (its effects before that step are this run's)\n", run.ForkedFrom, run.ForkedAtStep)
	}
	if len(run.Forks) > 0 {
		fmt.Fprintf(out, "forks: %s (each took over this run's effects before its step)\n", strings.Join(run.Forks, ", "))
	}
	if run.Answer != "" {
		fmt.Fprintf(out, "answer: %s\n", run.Answer)
	}
	if run.HandoffNote != "" {
		fmt.Fprintf(out, "handoff note: %s\n", run.HandoffNote)
	}
	fmt.Fprintf(out, "steps used: %d, tokens: %d, usd: %.4f\n", run.StepsUsed, run.TokensUsed, run.USDSpent)
	fmt.Fprintf(out, "calls: %d, leaf calls: %d, retries: %d %s, amplification: %.2f\n",
		counters.Calls, counters.LeafCalls, counters.Retries, perTool(counters.ToolRetries), counters.Amplification)
	switch {
	case run.StatusDetail == "":
	case run.Status == agentsagatype.RunEscalated || run.Status == agentsagatype.RunNeedsAttention:
		fmt.Fprintf(out, "waiting for a human: %s\n", run.StatusDetail)
	case run.Status == agentsagatype.RunQueued:
		fmt.Fprintf(out, "waiting to be admitted: %s\n", strings.TrimPrefix(run.StatusDetail, "queued: "))
	case run.Status == agentsagatype.RunRunning:
		// e.g. a call parked behind an open circuit breaker
		fmt.Fprintf(out, "now: %s\n", run.StatusDetail)
	}
	for _, q := range quotas {
		printQuota(out, q)
	}
	printApprovals(out, approvals)
	printActions(out, actions)
	stack, err := store.CompensationStack(ctx, id)
	if err != nil {
		return err
	}
	if len(stack) > 0 {
		fmt.Fprintf(out, "\ncompensations, in the order they are walked (%d):\n", len(stack))
		tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  FORWARD KEY\tUNDONE BY\tSTATUS\tNOTE")
		for _, c := range stack {
			note := c.Error
			if c.Reason != "" {
				note = "by a human: " + c.Reason
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.ForwardKey, c.Tool, c.Status, oneLine(note, 80))
		}
		tw.Flush()
	}
	return nil
}

// printApprovals lists the run's approval requests: what waits, and who
// decided what.
func printApprovals(out io.Writer, approvals []agentsagatype.Approval) {
	if len(approvals) == 0 {
		return
	}
	fmt.Fprintf(out, "\napprovals (%d):\n", len(approvals))
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CALL\tTOOL\tSTATUS\tBY\tREASON\tARGUMENTS")
	for _, a := range approvals {
		status := a.Status
		if status == agentsagatype.ApprovalAwaiting {
			status += " since " + a.RequestedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", a.Call, a.Tool, status, a.DecidedBy, oneLine(a.Reason, 60), oneLine(a.Arguments, 60))
	}
	tw.Flush()
}

func perTool(retries map[string]int) string {
	if len(retries) == 0 {
		return ""
	}
	names := make([]string, 0, len(retries))
	for name := range retries {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %d", name, retries[name])
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func printActions(out io.Writer, actions []agentsagatype.Action) {
	fmt.Fprintf(out, "\nactions (%d):\n", len(actions))
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tSTATUS\tATTEMPTS\tARGUMENTS\tRESULT")
	for _, a := range actions {
		result := a.Result
		if a.Error != "" {
			result = "failed: " + a.Error
		}
		status := a.Status
		if a.FenceReason != "" {
			status += " (fenced: " + a.FenceReason + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", a.Key, status, a.Attempts, oneLine(a.Arguments, 60), oneLine(result, 80))
	}
	tw.Flush()
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// connect dials Temporal and opens the ledger, as the environment says;
// closing closes both.
func connect(ctx context.Context) (worker.Config, client.Client, *ledger.Store, func(), error) {
	cfg := worker.ConfigFromEnv()
	c, err := worker.Dial(ctx, cfg)
	if err != nil {
		return cfg, nil, nil, nil, err
	}
	store, err := ledger.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		c.Close()
		return cfg, nil, nil, nil, err
	}
	return cfg, c, store, func() { store.Close(); c.Close() }, nil
}
