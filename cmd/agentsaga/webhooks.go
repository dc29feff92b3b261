package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga/internal/webhooks"
)

// webhooksCommand manages the webhooks that tell people what runs need
// from them (issue 44, docs/webhooks.md): endpoints, their secrets, and
// every delivery and its attempts.
func webhooksCommand() *cobra.Command {
	var account string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "webhooks [--account ACCOUNT] [--json]",
		Short: "List the webhook endpoints (of ACCOUNT and its sub-accounts; all without one), never their secrets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withWebhooks(cmd, func(store *webhooks.Store) error {
				list, err := store.List(cmd.Context(), account)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return printJSON(out, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no webhook; make one with: agentsaga webhooks create --url URL --events "+strings.Join(webhooks.Events, ","))
					return nil
				}
				tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tURL\tEVENTS\tACCOUNT\tFORMAT\tSTATE\tCREATED")
				for _, e := range list {
					state := "enabled"
					if !e.DisabledAt.IsZero() {
						state = "disabled: " + e.DisabledReason
					}
					if e.AllowPrivate {
						state += " (private targets allowed)"
					}
					if !e.PreviousUntil.IsZero() {
						state += ", old secret signs until " + e.PreviousUntil.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.URL, strings.Join(e.Events, ","), cmpOrAll(e.Account),
						e.Format, state, e.CreatedAt.UTC().Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&account, "account", "", "only the endpoints of this account and its sub-accounts")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(webhooksCreateCommand(), webhooksRotateCommand(), webhooksDeliveriesCommand(),
		webhooksIDCommand("delete ID", "Delete a webhook endpoint and its deliveries",
			func(s *webhooks.Store) func(context.Context, string, string) error { return s.Delete }, "deleted webhook %s"),
		webhooksIDCommand("enable ID", "Enable an endpoint a 410 disabled: the deliveries it held go out",
			func(s *webhooks.Store) func(context.Context, string, string) error { return s.Enable }, "enabled webhook %s"),
		webhooksIDCommand("redeliver DELIVERY_ID", "Send a delivery again, under the same webhook-id, with a retry window of its own",
			func(s *webhooks.Store) func(context.Context, string, string) error { return s.Redeliver },
			"delivery %s goes out again (a worker or serve process sends it)"))
	return cmd
}

func webhooksCreateCommand() *cobra.Command {
	var n webhooks.NewEndpoint
	cmd := &cobra.Command{
		Use:   "create --url URL --events " + strings.Join(webhooks.Events, ",") + " [--account A] [--format standard|slack] [--allow-private] [--redact PATH]...",
		Short: "Make a webhook endpoint and print its signing secret, the only time it is shown",
		Long: `Make a webhook endpoint. Its messages are signed as Standard Webhooks specifies (docs/webhooks.md
shows how to verify them in Go, Python and Node); the secret is printed once.

An endpoint with --account hears that account's runs and its sub-accounts'; without, every run.
--format slack posts {"text": ...} for a Slack incoming webhook. Loopback, private, link-local and
CGNAT addresses are refused, when the connection is made, unless --allow-private (tests, development).
Each --redact JSON path ($.customer.email) is replaced by "[redacted]" in an approval's arguments.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withWebhooks(cmd, func(store *webhooks.Store) error {
				e, err := store.Create(cmd.Context(), n)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), e.Secret)
				fmt.Fprintf(cmd.ErrOrStderr(), "webhook %s to %s (%s, %s): keep the secret now, it is not shown again; verify each message with it\n",
					e.ID, e.URL, strings.Join(e.Events, ","), cmpOrAll(e.Account))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&n.URL, "url", "", "where to POST (http:// or https://)")
	cmd.Flags().StringSliceVar(&n.Events, "events", nil, "what to hear: "+strings.Join(webhooks.Events, ", "))
	cmd.Flags().StringVar(&n.Account, "account", "", "hear this account's runs and its sub-accounts'; every run without one")
	cmd.Flags().StringVar(&n.Format, "format", webhooks.FormatStandard, "standard (Standard Webhooks JSON) or slack (a Slack incoming webhook)")
	cmd.Flags().BoolVar(&n.AllowPrivate, "allow-private", false, "allow loopback, private and link-local targets (tests, development)")
	cmd.Flags().StringArrayVar(&n.Redact, "redact", nil, "a JSON path redacted from an approval's arguments ($.customer.email); repeat for more")
	cmd.Flags().StringVar(&n.CreatedBy, "by", "", "who makes it, for the record")
	return cmd
}

// webhookAction is what an ID command does, on the store.
type webhookAction func(*webhooks.Store) func(ctx context.Context, scope, id string) error

// webhooksIDCommand is a command that does one thing to the endpoint or
// delivery ID, and says so (done, with the ID).
func webhooksIDCommand(use, short string, do webhookAction, done string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withWebhooks(cmd, func(store *webhooks.Store) error {
				if err := do(store)(cmd.Context(), "", args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), done+"\n", args[0])
				return nil
			})
		},
	}
}

func webhooksRotateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate ID",
		Short: "Give an endpoint a new secret and print it; the old one stays valid, and signs beside it, for 24 hours",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withWebhooks(cmd, func(store *webhooks.Store) error {
				e, err := store.Rotate(cmd.Context(), "", args[0])
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), e.Secret)
				fmt.Fprintf(cmd.ErrOrStderr(), "webhook %s: new secret; the old one also signs until %s\n", e.ID, e.PreviousUntil.UTC().Format(time.RFC3339))
				return nil
			})
		},
	}
}

func webhooksDeliveriesCommand() *cobra.Command {
	var f webhooks.Filter
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "deliveries [--endpoint ID] [--run RUN] [--limit N] [--json]",
		Short: "List webhook deliveries, newest first, with their attempts (--json lists every attempt)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withWebhooks(cmd, func(store *webhooks.Store) error {
				f.Attempts = asJSON
				list, err := store.Deliveries(cmd.Context(), f)
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return printJSON(out, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no delivery")
					return nil
				}
				tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID (webhook-id)\tENDPOINT\tRUN\tSEQ\tEVENT\tSTATUS\tATTEMPTS\tCREATED\tLAST")
				for _, d := range list {
					last := d.LastError
					switch {
					case d.Status == webhooks.StatusDelivered:
						last = fmt.Sprintf("%d at %s", d.LastStatus, d.DeliveredAt.UTC().Format(time.RFC3339))
					case !d.NextAttempt.IsZero():
						last += "; next attempt " + d.NextAttempt.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.Endpoint, d.Run, d.Seq, d.Event, d.Status,
						d.Attempts, d.CreatedAt.UTC().Format(time.RFC3339), last)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&f.Endpoint, "endpoint", "", "only this endpoint's")
	cmd.Flags().StringVar(&f.Run, "run", "", "only this run's (its workflow ID)")
	cmd.Flags().IntVar(&f.Limit, "limit", 100, "at most this many")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, with every attempt")
	return cmd
}

// withWebhooks runs fn on the webhooks in DATABASE_URL's ledger.
func withWebhooks(cmd *cobra.Command, fn func(*webhooks.Store) error) error {
	return withLedgerPool(cmd, func(pool *pgxpool.Pool) error { return fn(webhooks.NewStore(pool)) })
}
