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
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// LedgerRow is one side of the ledger scenario.
type LedgerRow struct {
	Contender    string  `json:"contender"`
	Clients      int     `json:"clients"`
	Seconds      float64 `json:"seconds"`
	WritesPerSec float64 `json:"writes_per_second"`
	Ratio        float64 `json:"ratio"`
}

// LedgerRounds is how many alternating rounds the ledger scenario splits
// its time into (fewer for a run shorter than that many seconds): on a
// machine with other work on it, a contender measured after the other
// would be measured under a different load.
const LedgerRounds = 5

// Ledger measures idempotent action writes per second as the engine makes
// them for every tool call: the claim, which also records the attempt's leaf
// call, and the completion, which also ends it (two statements, two
// commits). Each client is a run of its own, with its row in runs (every
// claim reads it FOR SHARE, as the fence requires), making one call after
// another. Beside it, pgbench runs a plain insert on the same server with
// the same number of clients. Each side gets duration in all, in up to
// LedgerRounds alternating rounds of whole seconds (pgbench counts in
// seconds). A round in which pgbench completed no transaction is an error,
// not a figure of zero.
func Ledger(ctx context.Context, databaseURL string, clients int, duration time.Duration) ([]LedgerRow, error) {
	rounds := max(1, min(LedgerRounds, int(duration/time.Second)))
	round := max(time.Second, (duration / time.Duration(rounds)).Round(time.Second))
	return ledgerScenario(ctx, databaseURL, clients, rounds, round, 0)
}

// LedgerCounted is Ledger by count instead of by time, for a smoke test on
// a machine other tests are loading: each side makes calls calls per
// client (rounded down to a multiple of the rounds), in up to LedgerRounds
// alternating rounds, and is timed over however long that takes (pgbench
// -t, where Ledger gives it -T). A window of a second or two can close
// before a starved pgbench has connected and committed anything, and it
// then prints no figure; a count always ends in one. Fewer calls or
// transactions than asked are an error. Its figures are not the
// benchmark's: a short count weighs each side's warm-up more.
func LedgerCounted(ctx context.Context, databaseURL string, clients, calls int) ([]LedgerRow, error) {
	if clients < 1 || calls < 1 {
		return nil, fmt.Errorf("bench: ledger: %d clients x %d calls", clients, calls)
	}
	rounds := max(1, min(LedgerRounds, calls))
	return ledgerScenario(ctx, databaseURL, clients, rounds, 0, calls/rounds)
}

// ledgerScenario runs rounds alternating rounds of both sides, each round
// either round long (perClient 0) or perClient calls from each client.
func ledgerScenario(ctx context.Context, databaseURL string, clients, rounds int, round time.Duration, perClient int) ([]LedgerRow, error) {
	// A database of its own: its runs must not be taken for abandoned ones
	// by a worker's reconciler, and the scenario's rows go with it.
	db, err := newBenchDatabaseFor(ctx, databaseURL, "ledger", true)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	store, err := ledgerdb.Open(ctx, db.url)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	prefix := "bench-ledger-" + nonce()
	for g := range clients {
		if err := store.StartRun(ctx, agentsagatype.Run{WorkflowID: fmt.Sprintf("%s-%d", prefix, g), RunID: prefix, Goal: "bench"}); err != nil {
			return nil, fmt.Errorf("bench: ledger: %w", err)
		}
	}
	pgbench, err := newPGBench(ctx, db.plainURL)
	if err != nil {
		return nil, err
	}
	defer pgbench.close(context.WithoutCancel(ctx))

	var sagaWrites, plainWrites float64
	var sagaSeconds, plainSeconds float64
	for r := range rounds {
		began := time.Now()
		var deadline time.Time
		if perClient == 0 {
			deadline = began.Add(round)
		}
		writes, err := ledgerCalls(ctx, store, prefix, r, clients, deadline, perClient)
		if err != nil {
			return nil, fmt.Errorf("bench: ledger: %w", err)
		}
		if want := int64(clients * perClient); perClient > 0 && writes != want {
			return nil, fmt.Errorf("bench: ledger: round %d made %d calls of %d", r+1, writes, want)
		}
		sagaWrites += float64(writes)
		sagaSeconds += time.Since(began).Seconds()
		if perClient > 0 {
			done, seconds, err := pgbench.count(ctx, clients, perClient)
			if err != nil {
				return nil, err
			}
			plainWrites += float64(done)
			plainSeconds += seconds
			continue
		}
		tps, err := pgbench.insert(ctx, clients, round)
		if err != nil {
			return nil, err
		}
		plainWrites += tps * round.Seconds()
		plainSeconds += round.Seconds()
	}
	plain := LedgerRow{Contender: "pgbench: one plain INSERT per transaction", Clients: clients, Seconds: plainSeconds,
		WritesPerSec: plainWrites / plainSeconds, Ratio: 1}
	saga := LedgerRow{Contender: "agentsaga call (claim + leaf call, completion + leaf end)", Clients: clients, Seconds: sagaSeconds,
		WritesPerSec: sagaWrites / sagaSeconds}
	saga.Ratio = saga.WritesPerSec / plain.WritesPerSec
	return []LedgerRow{plain, saga}, nil
}

// ledgerCalls makes calls from clients goroutines, each in its own run,
// until deadline (when it is not zero) and perClient calls each (when it
// is not zero), as the engine makes a successful tool call's writes, and
// returns how many it completed. A claim of a new key must execute.
func ledgerCalls(ctx context.Context, store *ledgerdb.Store, prefix string, round, clients int, deadline time.Time, perClient int) (int64, error) {
	var writes atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			run := fmt.Sprintf("%s-%d", prefix, g)
			for i := 0; (deadline.IsZero() || time.Now().Before(deadline)) && (perClient == 0 || i < perClient); i++ {
				// The bench's own activity ID, about as long as an agent
				// run's (step-003-call-1-search), unique in the run.
				activityID := fmt.Sprintf("round-%d-call-%d-bench", round, i+1)
				key := callKey(run, activityID)
				claim, err := store.ClaimCall(ctx, ledgerdb.ActionRequest{Key: key, WorkflowID: run, ActivityID: activityID, Tool: "bench", Arguments: `{}`},
					ledgerdb.LeafCall{Attempt: 1, Kind: ledgerdb.LeafTool, Target: "bench"}, time.Minute)
				if err == nil && !claim.Execute {
					err = fmt.Errorf("the claim of new key %s did not execute", key)
				}
				if err == nil {
					_, err = store.SettleAttempt(ctx, key, claim.Action.Attempts, ledgerdb.AttemptEnd{
						Status: agentsagatype.ActionCompleted, Result: `{"ok":true}`, LeafCallID: claim.LeafCallID})
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
	return writes.Load(), firstErr
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// pgBench runs pgbench's one-statement insert into a scratch table with a
// unique key.
type pgBench struct {
	databaseURL, dir, script string
	conn                     *pgx.Conn
}

func newPGBench(ctx context.Context, databaseURL string) (*pgBench, error) {
	config, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return nil, err
	}
	p := &pgBench{databaseURL: databaseURL, conn: conn}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_pgbench_insert (id bigserial PRIMARY KEY, k text UNIQUE, v text)`); err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("bench: pgbench table: %w", err)
	}
	if p.dir, err = os.MkdirTemp("", "agentsaga-pgbench"); err != nil {
		p.close(ctx)
		return nil, err
	}
	p.script = filepath.Join(p.dir, "insert.sql")
	body := "\\set r random(1, 9000000000000000000)\nINSERT INTO bench_pgbench_insert (k, v) VALUES (:client_id || '-' || :r, '{\"ok\":true}');\n"
	if err := os.WriteFile(p.script, []byte(body), 0o644); err != nil {
		p.close(ctx)
		return nil, err
	}
	return p, nil
}

// insert runs the script from clients clients for d, and returns its
// transactions per second. A window in which no transaction completed (on
// a starved machine) has no figure and is an error.
func (p *pgBench) insert(ctx context.Context, clients int, d time.Duration) (float64, error) {
	out, err := p.run(ctx, clients, "-T", strconv.Itoa(int(d.Seconds())))
	if err != nil {
		return 0, err
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("bench: pgbench printed no tps: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

var processedLine = regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`)

// count runs the script perClient times from each of clients clients, and
// returns how many transactions completed and in how many seconds, as
// pgbench timed them (after its connections were made).
func (p *pgBench) count(ctx context.Context, clients, perClient int) (int64, float64, error) {
	out, err := p.run(ctx, clients, "-t", strconv.Itoa(perClient))
	if err != nil {
		return 0, 0, err
	}
	m, t := processedLine.FindSubmatch(out), tpsLine.FindSubmatch(out)
	if m == nil || t == nil {
		return 0, 0, fmt.Errorf("bench: pgbench printed no count or no tps: %s", out)
	}
	done, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		return 0, 0, err
	}
	tps, err := strconv.ParseFloat(string(t[1]), 64)
	if err != nil {
		return 0, 0, err
	}
	if want := int64(clients * perClient); done != want || tps <= 0 {
		return 0, 0, fmt.Errorf("bench: pgbench made %d transactions of %d (tps %g): %s", done, want, tps, out)
	}
	return done, float64(done) / tps, nil
}

// run runs pgbench's insert script from clients clients, limited by limit
// (-T seconds or -t transactions), and returns its output.
func (p *pgBench) run(ctx context.Context, clients int, limit ...string) ([]byte, error) {
	args := append([]string{"-n", "-c", strconv.Itoa(clients), "-j", "2"}, limit...)
	cmd := exec.CommandContext(ctx, "pgbench", append(args, "-f", p.script, p.databaseURL)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("bench: pgbench: %w: %s", err, out)
	}
	return out, nil
}

func (p *pgBench) close(ctx context.Context) {
	_, _ = p.conn.Exec(ctx, `DROP TABLE IF EXISTS bench_pgbench_insert`)
	p.conn.Close(ctx)
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

// PrintLedger writes the ledger scenario's table.
func PrintLedger(out io.Writer, title string, rows []LedgerRow) {
	fmt.Fprintf(out, "%s\n", title)
	tw := newTable(out, "  CONTENDER\tCLIENTS\tSECONDS\tWRITES/S\tRATIO")
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%d\t%.0f\t%.0f\t%.2f\n", r.Contender, r.Clients, r.Seconds, r.WritesPerSec, r.Ratio)
	}
	tw.Flush()
}
