package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/ledger"
)

// LedgerRow is one side of the ledger scenario.
type LedgerRow struct {
	Contender    string  `json:"contender"`
	Clients      int     `json:"clients"`
	Seconds      float64 `json:"seconds"`
	WritesPerSec float64 `json:"writes_per_second"`
	Ratio        float64 `json:"ratio"`
}

// Ledger measures idempotent action writes per second (a claim and a
// completion per key, as every tool call makes) beside pgbench running a
// plain insert on the same server with the same number of clients, for
// duration each.
func Ledger(ctx context.Context, databaseURL string, clients int, duration time.Duration) ([]LedgerRow, error) {
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	prefix := "bench-ledger-" + nonce()
	var writes atomic.Int64
	var firstErr error
	var once sync.Once
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				key := fmt.Sprintf("%s/%d/%d", prefix, g, i)
				claim, err := store.ClaimAction(ctx, ledger.ActionRequest{Key: key, WorkflowID: prefix, ActivityID: key, Tool: "bench", Arguments: `{}`}, time.Minute)
				if err == nil && claim.Execute {
					_, err = store.CompleteAction(ctx, key, claim.Action.Attempts, `{"ok":true}`)
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				writes.Add(1)
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("bench: ledger: %w", firstErr)
	}
	saga := LedgerRow{Contender: "agentsaga action (claim + complete)", Clients: clients, Seconds: duration.Seconds(),
		WritesPerSec: float64(writes.Load()) / duration.Seconds()}
	if _, err := store.Pool().Exec(ctx, `DELETE FROM actions WHERE workflow_id = $1`, prefix); err != nil {
		return nil, fmt.Errorf("bench: ledger: clean up: %w", err)
	}

	tps, err := pgbenchInsert(ctx, databaseURL, clients, duration)
	if err != nil {
		return nil, err
	}
	plain := LedgerRow{Contender: "pgbench: one plain INSERT per transaction", Clients: clients, Seconds: duration.Seconds(), WritesPerSec: tps, Ratio: 1}
	saga.Ratio = saga.WritesPerSec / tps
	return []LedgerRow{plain, saga}, nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// pgbenchInsert runs pgbench with a one-statement insert script against a
// scratch table, and returns its transactions per second.
func pgbenchInsert(ctx context.Context, databaseURL string, clients int, duration time.Duration) (float64, error) {
	config, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return 0, err
	}
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_pgbench_insert (id bigserial PRIMARY KEY, k text UNIQUE, v text)`); err != nil {
		return 0, fmt.Errorf("bench: pgbench table: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS bench_pgbench_insert`) //nolint:errcheck

	dir, err := os.MkdirTemp("", "agentsaga-pgbench")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "insert.sql")
	body := "\\set r random(1, 2000000000)\nINSERT INTO bench_pgbench_insert (k, v) VALUES (:client_id || '-' || :r, '{\"ok\":true}');\n"
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, "pgbench", "-n", "-c", strconv.Itoa(clients), "-j", "2",
		"-T", strconv.Itoa(int(duration.Seconds())), "-f", script, databaseURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("bench: pgbench: %w: %s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("bench: pgbench printed no tps: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// PrintLedger writes the ledger scenario's table.
func PrintLedger(out io.Writer, title string, rows []LedgerRow) {
	fmt.Fprintf(out, "%s\n", title)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  CONTENDER\tCLIENTS\tSECONDS\tWRITES/S\tRATIO")
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%d\t%.0f\t%.0f\t%.2f\n", r.Contender, r.Clients, r.Seconds, r.WritesPerSec, r.Ratio)
	}
	tw.Flush()
}
