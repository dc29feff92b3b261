package main

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/worker"
)

// approvalsCommand lists the calls waiting for a human across the fleet,
// from the ledger, oldest first.
func approvalsCommand() *cobra.Command {
	var asJSON bool
	var limit int
	cmd := &cobra.Command{
		Use:   "approvals [--json] [--limit N]",
		Short: "List the calls waiting for approval across the fleet, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("approvals: --limit %d must be positive", limit)
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			waiting, err := store.AwaitingApprovals(cmd.Context(), limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, waiting)
			}
			if len(waiting) == 0 {
				fmt.Fprintln(out, "no call waits for approval")
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WAITING SINCE\tRUN\tCALL\tTOOL\tARGUMENTS\tWHY")
			for _, a := range waiting {
				fmt.Fprintf(tw, "%s (%s)\t%s\t%s\t%s\t%s\t%s\n", a.RequestedAt.UTC().Format(time.RFC3339),
					time.Since(a.RequestedAt).Round(time.Second), a.WorkflowID, a.Call, a.Tool, oneLine(a.Arguments, 80), oneLine(a.Why, 80))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintln(out, "\ndecide with: agentsaga approve RUN CALL [--reason TEXT] | agentsaga deny RUN CALL --reason TEXT")
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&limit, "limit", 100, "list at most this many")
	return cmd
}

// decisionCommand is approve or deny: the run's Update, which records who
// decided in the ledger before the call is sent (or refused).
func decisionCommand(use, short string, approve bool) *cobra.Command {
	var by, reason string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := "approve"
			if !approve {
				name = "deny"
				if reason == "" {
					return fmt.Errorf("deny: --reason is required: the model reads it, and the ledger keeps it")
				}
			}
			if by == "" {
				by = caller()
			}
			// A decision that comes second is told whose came first, from
			// the ledger: the run forgets a call once it is settled.
			_, c, store, closeAll, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer closeAll()
			run := agentsaga.Get(c, args[0]).WithLedger(store)
			decide := run.Approve
			if !approve {
				decide = run.Deny
			}
			approval, err := decide(cmd.Context(), args[1], by, reason)
			var first *agentsaga.AlreadyDecidedError
			if errors.As(err, &first) && first.Decision == agentsagatype.ApprovalSuperseded {
				return fmt.Errorf("%s %s %s: refused: the run was forked into %s, which asks again for the call: decide the fork's request (agentsaga approvals)",
					name, args[0], args[1], first.By)
			}
			if errors.As(err, &first) && first.InLedger {
				// Exits non-zero: this decision was not taken.
				why := ""
				if first.Reason != "" {
					why = fmt.Sprintf(" (%q)", first.Reason)
				}
				return fmt.Errorf("%s %s %s: refused: it was already %s by %s at %s%s; the first decision stands",
					name, args[0], args[1], first.Decision, first.By, first.At.UTC().Format(time.RFC3339), why)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s by %s at %s\n", args[0], args[1], approval.Status, approval.DecidedBy,
				approval.DecidedAt.UTC().Format(time.RFC3339))
			if approve {
				// An escalated run sends it once it is resumed and its
				// model asks for the call again.
				fmt.Fprintf(cmd.OutOrStdout(), "%s: recorded; the run sends %s once, under %s\n", name, approval.Tool, approval.Key)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who decides, as the ledger keeps it (default: your user@host)")
	cmd.Flags().StringVar(&reason, "reason", "", "why (required to deny: the model reads it)")
	return cmd
}

// caller is who runs this command: user@host.
func caller() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

func approveCommand() *cobra.Command {
	return decisionCommand("approve RUN_ID CALL_ID [--by NAME] [--reason TEXT]",
		"Approve a call waiting for approval: it is sent once, after the ledger records who approved", true)
}

func denyCommand() *cobra.Command {
	return decisionCommand("deny RUN_ID CALL_ID --reason TEXT [--by NAME]",
		"Deny a call waiting for approval: it is never sent, and the model reads why", false)
}
