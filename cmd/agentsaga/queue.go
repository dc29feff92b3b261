package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/worker"
)

// queueCommand shows the admission queues (issue 43): the runs that wait
// to be admitted whole, in order, with why they wait and an estimate of
// when they start; and the operators' part in them: cancelling a queued
// run, and each account's share of the fleet.
func queueCommand() *cobra.Command {
	var account string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "queue [--account A] [--json]",
		Short: "List the runs waiting to be admitted: their place, priority, why they wait, their estimate, how long they have waited, and when they may start",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if account != "" {
				if err := budget.ValidateAccount(account); err != nil {
					return fmt.Errorf("queue: --account: %w", err)
				}
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			queued, err := store.ListQueue(cmd.Context(), account)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if queued == nil {
					queued = []ledgerdb.QueuedRun{}
				}
				return printJSON(out, queued)
			}
			printQueue(out, queued, account, time.Now())
			return nil
		},
	}
	cmd.Flags().StringVar(&account, "account", "", "only the runs of this account and the accounts under it")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(queueCancelCommand(), queueLimitCommand(), queueLimitsCommand())
	return cmd
}

// printQueue prints the queued runs as a table, in each root account's
// order.
func printQueue(out io.Writer, queued []ledgerdb.QueuedRun, account string, now time.Time) {
	if len(queued) == 0 {
		if account != "" {
			fmt.Fprintf(out, "no run of %s is queued\n", account)
		} else {
			fmt.Fprintln(out, "no run is queued")
		}
		return
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLACE\tRUN\tACCOUNT\tPRIORITY\tESTIMATE\tWAITED\tEXPECTED START\tWHY IT WAITS")
	for _, q := range queued {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t$%.4f\t%s\t%s\t%s\n", q.Place, q.RunID, q.Account, q.Priority, q.EstimateUSD,
			q.Wait.Round(time.Second), expectedStart(q.ExpectedStart, now), cmp.Or(q.Reason, "not looked at by a pass yet"))
	}
	_ = tw.Flush()
}

// expectedStart says when a queued run may start: in how long and at
// what time, or "unknown" when its queue admitted nothing in the last
// hour to go by.
func expectedStart(at, now time.Time) string {
	if at.IsZero() {
		return "unknown"
	}
	in := max(at.Sub(now), 0).Round(time.Second)
	return fmt.Sprintf("in ~%s (%s)", in, at.UTC().Format(time.RFC3339))
}

func queueCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel RUN_ID",
		Short: "Take a queued run out of its queue: it ends failed without taking a turn, and holds nothing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			_, c, store, closeAll, err := connect(cmd.Context())
			if err != nil {
				return err
			}
			defer closeAll()
			err = agentsaga.Get(c, id).WithLedger(store).CancelQueued(cmd.Context())
			switch {
			case errors.Is(err, agentsaga.ErrRunNotFound):
				return fmt.Errorf("queue cancel %s: no run with this ID in the ledger (agentsaga queue lists the queued runs)", id)
			case errors.Is(err, agentsaga.ErrNotQueued):
				return fmt.Errorf("queue cancel %s: the run is not queued, so there is nothing to cancel (%w); "+
					"a run that was admitted is stopped with its own decisions (agentsaga abort when it is escalated)", id, err)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: taken out of the queue; it ends without a turn (a fork walks back what it inherited)\n", id)
			return nil
		},
	}
}

func queueLimitCommand() *cobra.Command {
	var maxRuns, weight int
	var by string
	cmd := &cobra.Command{
		Use:   "limit ACCOUNT [--max-concurrent-runs N] [--weight W] [--by NAME]",
		Short: "Set ACCOUNT's share of the fleet: how many of its runs may be admitted at once, and its weight in the round robin and as Temporal's fairness weight",
		Long: `Set ACCOUNT's share of the fleet. --max-concurrent-runs bounds the runs of the account and the
accounts under it that are admitted at once (0 removes the bound); --weight (1 to 1000, default 1)
is the account's share in its root account's round robin, and its fairness weight on Temporal
servers that honour fairness keys. A flag left out keeps its value. A raised limit starts waiting
runs at once: the ledger notifies the workers' admission loops.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			account := args[0]
			setMax, setWeight := cmd.Flags().Changed("max-concurrent-runs"), cmd.Flags().Changed("weight")
			switch {
			case !setMax && !setWeight:
				return fmt.Errorf("queue limit %s: give --max-concurrent-runs, --weight or both", account)
			case setMax && maxRuns < 0:
				return fmt.Errorf("queue limit %s: --max-concurrent-runs %d is negative; give a number of runs, or 0 for no bound", account, maxRuns)
			case setWeight && (weight < 1 || weight > 1000):
				return fmt.Errorf("queue limit %s: --weight %d is outside 1 to 1000", account, weight)
			}
			if err := budget.ValidateAccount(account); err != nil {
				return fmt.Errorf("queue limit: %w", err)
			}
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			old, err := accountLimits(cmd.Context(), store, account)
			if err != nil {
				return err
			}
			l := old
			if setMax {
				l.MaxConcurrentRuns = maxRuns
			}
			if setWeight {
				l.Weight = weight
			}
			if err := store.SetAccountLimits(cmd.Context(), l, cmp.Or(by, caller())); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "account %s: max_concurrent_runs %s (was %s), weight %d (was %d)\n", account,
				maxConcurrent(l.MaxConcurrentRuns), maxConcurrent(old.MaxConcurrentRuns), l.Weight, old.Weight)
			return nil
		},
	}
	cmd.Flags().IntVar(&maxRuns, "max-concurrent-runs", 0, "the most runs of the account (and the accounts under it) admitted at once; 0: no bound")
	cmd.Flags().IntVar(&weight, "weight", 1, "the account's share in its root account's round robin and its Temporal fairness weight, 1 to 1000")
	cmd.Flags().StringVar(&by, "by", "", "who sets it, as the ledger keeps it (default: your user@host)")
	return cmd
}

// accountLimits are the limits set on account itself: none and weight 1
// when nothing is set.
func accountLimits(ctx context.Context, store *ledgerdb.Store, account string) (ledgerdb.AccountLimits, error) {
	all, err := store.ListAccountLimits(ctx)
	if err != nil {
		return ledgerdb.AccountLimits{}, err
	}
	for _, l := range all {
		if l.Account == account {
			return l, nil
		}
	}
	return ledgerdb.AccountLimits{Account: account, Weight: 1}, nil
}

func maxConcurrent(n int) string {
	if n == 0 {
		return "none"
	}
	return strconv.Itoa(n)
}

func queueLimitsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "limits [--json]",
		Short: "List the accounts' limits: max_concurrent_runs and weight, and who set them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
			if err != nil {
				return err
			}
			defer store.Close()
			limits, err := store.ListAccountLimits(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if limits == nil {
					limits = []ledgerdb.AccountLimits{}
				}
				return printJSON(out, limits)
			}
			if len(limits) == 0 {
				fmt.Fprintln(out, "no account has limits set (every account weighs 1, with no bound on its runs); set them with: agentsaga queue limit ACCOUNT --max-concurrent-runs N --weight W")
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ACCOUNT\tMAX CONCURRENT RUNS\tWEIGHT\tSET BY")
			for _, l := range limits {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s %s\n", l.Account, maxConcurrent(l.MaxConcurrentRuns), l.Weight, l.UpdatedBy,
					l.UpdatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
