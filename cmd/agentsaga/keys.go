package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/worker"
)

// keysCommand manages the HTTP API's bearer keys (issue 33): made with a
// name, scopes and optionally an account, shown once, revocable.
func keysCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "keys [--json]",
		Short: "List the HTTP API's keys, live and revoked (never a key itself: only its hash is kept)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withKeys(cmd, func(keys *apikeys.Keys) error {
				list, err := keys.List(cmd.Context())
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if asJSON {
					return printJSON(out, list)
				}
				if len(list) == 0 {
					fmt.Fprintln(out, "no API key; make one with: agentsaga keys create --name NAME --scopes runs:read")
					return nil
				}
				tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tSCOPES\tACCOUNT\tCREATED\tREVOKED")
				for _, k := range list {
					revoked := "-"
					if !k.Revoked.IsZero() {
						revoked = k.Revoked.UTC().Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.Name, strings.Join(k.Scopes, ","), cmpOrAll(k.Account),
						k.Created.UTC().Format(time.RFC3339), revoked)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(keysCreateCommand(), keysRevokeCommand())
	return cmd
}

func keysCreateCommand() *cobra.Command {
	var name, account string
	var scopes []string
	cmd := &cobra.Command{
		Use:   "create --name NAME --scopes " + strings.Join(apikeys.Scopes, ",") + " [--account ACCOUNT]",
		Short: "Make an API key and print it, the only time it is shown; a key bound to an account sees that account's runs and its sub-accounts'",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withKeys(cmd, func(keys *apikeys.Keys) error {
				token, k, err := keys.Create(cmd.Context(), name, scopes, account)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), token)
				fmt.Fprintf(cmd.ErrOrStderr(), "key %s (%s, %s): keep it now, it is not shown again; send it as Authorization: Bearer KEY\n",
					k.Name, strings.Join(k.Scopes, ","), cmpOrAll(k.Account))
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "who the key acts as: a start or a decision records it")
	cmd.Flags().StringSliceVar(&scopes, "scopes", nil, "what the key may do: "+strings.Join(apikeys.Scopes, ", "))
	cmd.Flags().StringVar(&account, "account", "", "the account whose runs (and sub-accounts' runs) the key sees; every run without one")
	return cmd
}

func keysRevokeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke the live key named NAME: its next request is refused",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withKeys(cmd, func(keys *apikeys.Keys) error {
				if err := keys.Revoke(cmd.Context(), args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked key %s\n", args[0])
				return nil
			})
		},
	}
}

// withKeys runs fn on the keys in DATABASE_URL's ledger.
func withKeys(cmd *cobra.Command, fn func(*apikeys.Keys) error) error {
	return withLedgerPool(cmd, func(pool *pgxpool.Pool) error { return fn(apikeys.New(pool)) })
}

// withLedgerPool runs fn on a pool of DATABASE_URL's ledger, closed after.
func withLedgerPool(cmd *cobra.Command, fn func(*pgxpool.Pool) error) error {
	store, err := ledgerdb.Open(cmd.Context(), worker.ConfigFromEnv().DatabaseURL)
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(store.Pool())
}

// cmpOrAll names a key's account, or says it sees every account.
func cmpOrAll(account string) string {
	if account == "" {
		return "all accounts"
	}
	return account
}

// printJSON writes v to out as indented JSON, as every --json does.
func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
