package main

import (
	"cmp"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/worker"
)

// spendCommand lists the accounts' spend caps with their current periods,
// and sets or removes them (issue 31). Caps are the operators' to set, not
// the spec's: every change is kept in the ledger with who made it.
func spendCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "spend [ACCOUNT] [--json]",
		Short: "List the spend caps of ACCOUNT and the accounts under it (all accounts without one): spent and reserved this period, and when it resets",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			account := ""
			if len(args) == 1 {
				account = args[0]
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			caps, err := store.SpendCaps(cmd.Context(), account)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, caps)
			}
			if len(caps) == 0 {
				fmt.Fprintln(out, "no spend cap is set; set one with: agentsaga spend set ACCOUNT --usd N --per day")
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ACCOUNT\tCAP\tADMITS\tFINISH RESERVE\tSPENT\tRESERVED\tLEFT\tRESETS\tRUNS QUEUED\tRUNS WAITING\tON EXHAUSTED\tSET BY")
			for _, c := range caps {
				cap := fmt.Sprintf("$%.2f a %s (%s)", c.USD, c.Period, c.TimeZone)
				if window, rolling := strings.CutPrefix(c.Period, "rolling "); rolling {
					cap = fmt.Sprintf("$%.2f in any %s", c.USD, window)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f%%\t$%.4f\t$%.4f\t$%.4f\t%s\t%d\t%d\t%s\t%s %s\n", c.Account, cap, admits(c.Admit),
					100*c.FinishReserve, c.Spent, c.Reserved, c.Left(), c.Resets.UTC().Format(time.RFC3339), c.Queued, c.Waiting, c.OnExhausted,
					c.UpdatedBy, c.UpdatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(spendSetCommand(), spendRemoveCommand(), spendReportCommand())
	return cmd
}

func spendSetCommand() *cobra.Command {
	var c ledgerdb.SpendCap
	var by string
	var rolling time.Duration
	cmd := &cobra.Command{
		Use:   "set ACCOUNT --usd N (--per minute|hour|day|month [--tz ZONE] | --rolling 24h) [--admit run|turn] [--on-exhausted finish|wait|escalate] [--finish-reserve SHARE] [--by NAME]",
		Short: "Cap what ACCOUNT (and the accounts under it) may spend a period; the ledger keeps who changed it, when, from what",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c.Account = args[0]
			if !cmd.Flags().Changed("usd") {
				return fmt.Errorf("spend set %s: --usd is required", c.Account)
			}
			if err := rollingPeriod(cmd, &c.Period, rolling); err != nil {
				return fmt.Errorf("spend set %s: %w", c.Account, err)
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			old, err := store.SetSpendCap(cmd.Context(), c, cmp.Or(by, caller()))
			if err != nil {
				return err
			}
			was := "none"
			if old != nil {
				was = fmt.Sprintf("$%.2f (%s, %s, admits %s)", old.USD, old.TimeZone, old.OnExhausted, admits(old.Admit))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "spend cap of %s per %s: $%.2f, admits %s, was %s\n", c.Account, c.Period, c.USD, admits(c.Admit), was)
			return nil
		},
	}
	cmd.Flags().Float64Var(&c.USD, "usd", 0, "the most the account may spend a period, in USD (required)")
	cmd.Flags().StringVar(&c.Period, "per", ledgerdb.SpendDay, "the period: minute, hour, day or month, calendar-aligned in --tz")
	cmd.Flags().StringVar(&c.TimeZone, "tz", "UTC", "the time zone the period is aligned in (an IANA name: Europe/Paris)")
	cmd.Flags().DurationVar(&rolling, "rolling", 0, "cap what the account spends in any window this long (24h, 90m), in place of a calendar --per")
	cmd.Flags().StringVar(&c.Admit, "admit", ledgerdb.SpendAdmitRun, "run: a run is admitted whole when the cap can hold its estimate, or waits queued; turn: the cap is shared out turn by turn")
	cmd.Flags().StringVar(&c.OnExhausted, "on-exhausted", "finish", "what an admitted run does when the cap cannot pay for its next turn: finish, wait or escalate")
	cmd.Flags().Float64Var(&c.FinishReserve, "finish-reserve", 0.1, "the share of the cap only finishing turns may use, so that a run the cap stops can pay for its partial answer (0: none)")
	cmd.Flags().StringVar(&by, "by", "", "who sets it, as the ledger keeps it (default: your user@host)")
	return cmd
}

func spendRemoveCommand() *cobra.Command {
	var period, by string
	var rolling time.Duration
	cmd := &cobra.Command{
		Use:   "remove ACCOUNT (--per minute|hour|day|month | --rolling 24h) [--by NAME]",
		Short: "Remove ACCOUNT's cap for a period; the ledger keeps who removed it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := rollingPeriod(cmd, &period, rolling); err != nil {
				return fmt.Errorf("spend remove %s: %w", args[0], err)
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			old, err := store.RemoveSpendCap(cmd.Context(), args[0], period, cmp.Or(by, caller()))
			if err != nil {
				return err
			}
			if old == nil {
				return fmt.Errorf("spend remove %s: no cap per %s to remove", args[0], period)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "spend cap of %s per %s removed (was $%.2f)\n", args[0], period, old.USD)
			return nil
		},
	}
	cmd.Flags().StringVar(&period, "per", ledgerdb.SpendDay, "the cap's period: minute, hour, day or month")
	cmd.Flags().DurationVar(&rolling, "rolling", 0, "the cap's rolling window (24h), in place of --per")
	cmd.Flags().StringVar(&by, "by", "", "who removes it, as the ledger keeps it (default: your user@host)")
	return cmd
}

func spendReportCommand() *cobra.Command {
	var by, since string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "report [--by account,model,day] [--since YYYY-MM-DD] [--json]",
		Short: "Attribute what the calls charged to accounts cost, from the ledger, by account, model and day (UTC)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from := time.Now().UTC().AddDate(0, 0, -30)
			if since != "" {
				var err error
				if from, err = time.Parse(time.DateOnly, since); err != nil {
					return fmt.Errorf("spend report: --since %q is not a date (YYYY-MM-DD)", since)
				}
			}
			var dims []string
			if by != "" {
				dims = strings.Split(by, ",")
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			lines, err := store.SpendReport(cmd.Context(), from, dims)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, lines)
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ACCOUNT\tMODEL\tDAY\tCALLS\tUSD\tINPUT TOKENS\tCACHE READ\tCACHE WRITE")
			for _, l := range lines {
				day := ""
				if !l.Day.IsZero() {
					day = l.Day.UTC().Format(time.DateOnly)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t$%.4f\t%d\t%d\t%d\n", l.Account, l.Model, day, l.Calls, l.USD,
					l.InputTokens, l.CachedTokens, l.CacheWriteTokens)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&by, "by", "account,model,day", "the dimensions to group by: account, model, day (comma-separated; empty: one total)")
	cmd.Flags().StringVar(&since, "since", "", "the first day (UTC) counted (default: 30 days ago)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// admits says how a cap admits work: whole runs, or turn by turn.
func admits(admit string) string {
	switch admit {
	case ledgerdb.SpendAdmitTurn:
		return "turns"
	}
	return "runs"
}

// rollingPeriod sets *period to the rolling window's, when --rolling is
// given: it replaces --per, and may not stand beside it.
func rollingPeriod(cmd *cobra.Command, period *string, window time.Duration) error {
	if !cmd.Flags().Changed("rolling") {
		return nil
	}
	if cmd.Flags().Changed("per") {
		return fmt.Errorf("--per %s and --rolling %s both name the period; give one", *period, window)
	}
	*period = ledgerdb.RollingPeriod(window)
	return nil
}
