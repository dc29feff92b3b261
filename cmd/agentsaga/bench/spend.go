package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/agentsagatest"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/worker"
)

// The spend scenario (issue 31) asks whether runs that share one account
// stay under the account's cap, however many worker processes they run
// on. Every run is charged by one fake OpenAI-compatible provider, which
// counts each request's tokens with the o200k tokenizer and reports them
// as usage; the bench prices what the provider counted itself, so no
// contender's own accounting decides its figures. Each measurement has a
// fresh provider and a fresh database.

// The contenders' names in the rows, and their short forms. agentsaga by
// run is the engine's default (issue 43: a run is admitted whole, or
// waits queued); by turn is the cap set to `admit: turn`, the cap shared
// out a turn at a time as before admission existed.
const (
	SpendPerRunContender        = "per-run budgets only"
	SpendCheckContender         = "check-then-record"
	SpendAgentsagaContender     = "agentsaga by run"
	SpendAgentsagaTurnContender = "agentsaga by turn"

	SpendPerRun        = "per-run"
	SpendCheck         = "check-then-record"
	SpendAgentsaga     = "agentsaga"
	SpendAgentsagaTurn = "agentsaga-turn"
)

var spendContenderNames = map[string]string{SpendPerRun: SpendPerRunContender, SpendCheck: SpendCheckContender,
	SpendAgentsaga: SpendAgentsagaContender, SpendAgentsagaTurn: SpendAgentsagaTurnContender}

// SpendWorkerReady is what `agentsaga bench spend-worker` prints once its
// worker polls.
const SpendWorkerReady = "spend-worker: polling"

// SpendCheckProvider is the model.provider the check-then-record
// contender's spec names: an OpenAI-compatible call between a read of the
// account's spend and a write of its cost (checkThenRecord).
const SpendCheckProvider = "check-then-record"

const (
	spendModel   = "gpt-4o-mini"
	spendAccount = "acme/support"
	// spendTable is the check-then-record contender's own book of what the
	// account spent, as a gateway keeps it.
	spendTable  = "bench_account_spend"
	spendLabel  = "bench: spend"
	spendSystem = "You are a bench agent. Call word_count when asked to, then answer briefly."
)

// SpendConfig sizes the scenario.
type SpendConfig struct {
	Processes []int `json:"processes"`
	// Runs start together, all charged to one account with a cap of
	// CapUSD; each has a budget of its own of RunUSD.
	Runs   int     `json:"runs"`
	CapUSD float64 `json:"cap_usd"`
	RunUSD float64 `json:"run_usd"`
	// ToolCalls is how many word_count calls the model asks for before
	// it answers: a run is ToolCalls+1 model turns.
	ToolCalls int `json:"tool_calls"`
	// USDPerMillion prices input and output tokens alike, in the spec,
	// the check-then-record gateway and the bench's own pricing.
	USDPerMillion float64 `json:"usd_per_million_tokens"`
	// MaxTokens is every request's max_tokens; a reply uses
	// CompletionTokens of it. GoalChars pads the goal.
	MaxTokens        int64 `json:"max_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	GoalChars        int   `json:"goal_chars"`
	// The provider answers in LatencyMin..LatencyMax.
	providerLatency
	// Runs not ended by the Timeout count as waiting (or as not ended)
	// and are terminated.
	contest
	// Resets is how many period resets the agentsaga by-run contender
	// makes at most, after its first period, for its queued runs.
	Resets int `json:"resets"`

	ProcessScenario
}

// DefaultSpend is 40 runs of 5 turns on one account with a $5 cap, each
// run about $0.44 alone (under its own budget, which it never reaches):
// some $18 of demand against the cap. The budget, $0.60, is also the
// estimate a run is admitted at (issue 43): at $0.50 the admitted runs
// held less than their turns reserve (a turn reserves its prompt's upper
// bound and max_tokens), and their last turns waited on each other.
var DefaultSpend = SpendConfig{Processes: []int{2, 4}, Runs: 40, CapUSD: 5, RunUSD: 0.6, ToolCalls: 4, USDPerMillion: 280,
	MaxTokens: 40, CompletionTokens: 20, GoalChars: 600, providerLatency: providerLatency{LatencyMin: 200 * time.Millisecond, LatencyMax: 800 * time.Millisecond},
	contest: contest{Contenders: []string{SpendPerRun, SpendCheck, SpendAgentsagaTurn, SpendAgentsaga}, PoolMaxConns: 8, Timeout: 3 * time.Minute}, Resets: 10}

// SpendRow is one contender on one process count.
type SpendRow struct {
	Contender string `json:"contender"`
	Processes int    `json:"processes"`
	Runs      int    `json:"runs"`
	// Requests, PromptTokens and CompletionTokens are what the provider
	// answered and counted; SpentUSD is that usage at the bench's price.
	Requests         int64   `json:"requests"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	SpentUSD         float64 `json:"spent_usd"`
	CapUSD           float64 `json:"cap_usd"`
	// OverspendUSD is what was spent past the cap, OverspendShare that
	// over the cap, Utilisation the spend over the cap.
	OverspendUSD   float64 `json:"overspend_usd"`
	OverspendShare float64 `json:"overspend_share"`
	Utilisation    float64 `json:"utilisation"`
	// Outcomes counts the runs by how they ended, as the ledger says
	// (waiting: still running on a spend cap's timer at the timeout;
	// unended: anything else still running then, or never recorded).
	Outcomes  map[string]int `json:"outcomes"`
	Completed int            `json:"completed"`
	Partial   int            `json:"partial"`
	Waiting   int            `json:"waiting"`
	Escalated int            `json:"escalated"`
	Failed    int            `json:"failed"`
	// Queued counts the runs waiting in the admission queue when the
	// period's runs had settled (agentsaga by run).
	Queued int `json:"queued"`
	// QueuedBehind counts the queued runs whose ledger row gives no
	// reason: those behind the first that did not fit.
	QueuedBehind int `json:"queued_behind,omitempty"`
	// Payable is how many runs the cap pays for (the cap over what one run
	// alone costs, SpendResult.AloneUSD); Goodput is Completed over it.
	Payable int     `json:"payable"`
	Goodput float64 `json:"goodput"`
	// Unexplained counts the runs that did not complete and give no
	// reason.
	Unexplained int `json:"unexplained"`
	// Reasons holds one reason per outcome other than completed.
	Reasons map[string]string `json:"reasons,omitempty"`
	// LedgerSpentUSD and LedgerReservedUSD are the account's spend periods
	// in agentsaga's ledger (the agentsaga contender); GatewaySpentUSD is
	// what the check-then-record gateway recorded.
	LedgerSpentUSD    *float64 `json:"ledger_spent_usd,omitempty"`
	LedgerReservedUSD *float64 `json:"ledger_reserved_usd,omitempty"`
	GatewaySpentUSD   *float64 `json:"gateway_spent_usd,omitempty"`
	Seconds           float64  `json:"seconds"`
	// Series is the account's spend over time: after each reply the
	// provider billed, what it had billed in all (SpentUSD at the end),
	// from the runs' start, until the period's runs settled.
	Series []SpendPoint `json:"series,omitempty"`
	// Resets are the periods after the first (agentsaga by run): the
	// cap's period moved back a month, one period each, while runs were
	// queued.
	Resets []SpendReset `json:"resets,omitempty"`
	// Admission is the admission queue's books once every run ended or
	// was stopped (agentsaga by run).
	Admission *SpendAdmission `json:"admission,omitempty"`
}

// SpendReset is one period after a reset: the runs it completed, those
// still queued at its end, and what the provider billed in it.
type SpendReset struct {
	Completed int     `json:"completed"`
	Queued    int     `json:"queued"`
	Requests  int64   `json:"requests"`
	SpentUSD  float64 `json:"spent_usd"`
	Seconds   float64 `json:"seconds"`
}

// SpendAdmission is what the ledger's admission queue holds at the end:
// runs ever admitted, runs still admitted, what they hold as run
// reservations, and what the spend periods hold reserved.
type SpendAdmission struct {
	Admitted      int     `json:"admitted"`
	StillAdmitted int     `json:"still_admitted"`
	HeldUSD       float64 `json:"held_usd"`
	ReservedUSD   float64 `json:"reserved_usd"`
}

// SpendPoint is what the provider had billed the account, at the bench's
// price, Seconds after the runs started.
type SpendPoint struct {
	Seconds float64 `json:"seconds"`
	USD     float64 `json:"usd"`
}

// SpendResult is the scenario's figures.
type SpendResult struct {
	Config SpendConfig `json:"config"`
	// AloneUSD is what one run alone cost (one run of the per-run
	// contender, measured first), and Payable how many of them the cap
	// pays for.
	AloneUSD float64    `json:"alone_usd"`
	Payable  int        `json:"payable"`
	Rows     []SpendRow `json:"rows"`
}

// Targets for the agentsaga rows (issue 31), and for goodput (issue 43).
const (
	SpendMinUtilisation = 0.95
	SpendMinGoodput     = 0.90
)

// spendEpsilon absorbs float rounding in sums of dollars.
const spendEpsilon = 1e-9

// spendUSD is what prompt and completion tokens cost at usd per million
// tokens each way.
func spendUSD(prompt, completion int64, inputPerMillion, outputPerMillion float64) float64 {
	return (float64(prompt)*inputPerMillion + float64(completion)*outputPerMillion) / 1e6
}

// spendFigures fills the row's spend against its cap.
func (r *SpendRow) spendFigures() {
	r.OverspendUSD = max(r.SpentUSD-r.CapUSD, 0)
	if r.OverspendUSD < spendEpsilon {
		r.OverspendUSD = 0
	}
	if r.CapUSD > 0 {
		r.OverspendShare = r.OverspendUSD / r.CapUSD
		r.Utilisation = r.SpentUSD / r.CapUSD
	}
}

// spendOutcome names how a run ended from its ledger row.
func spendOutcome(status, detail string) string {
	switch status {
	case "":
		return "unended"
	case agentsagatype.RunRunning:
		if strings.Contains(detail, "waiting for the spend cap") {
			return "waiting"
		}
		return "unended"
	}
	return status
}

// count adds one run's outcome to the row.
func (r *SpendRow) count(outcome, reason string) {
	r.Outcomes[outcome]++
	switch outcome {
	case agentsagatype.RunCompleted:
		r.Completed++
		return
	case agentsagatype.RunPartial:
		r.Partial++
	case "waiting":
		r.Waiting++
	case agentsagatype.RunEscalated:
		r.Escalated++
	case agentsagatype.RunFailed:
		r.Failed++
	case agentsagatype.RunQueued:
		r.Queued++
		if strings.TrimSpace(reason) == "" {
			// Its place in the queue is its reason: an admission pass
			// writes why to the first run of an account that does not fit,
			// not to those behind it.
			r.QueuedBehind++
			return
		}
	}
	if strings.TrimSpace(reason) == "" {
		r.Unexplained++
	} else if _, ok := r.Reasons[outcome]; !ok {
		r.Reasons[outcome] = reason
	}
}

// SpendVerdicts says, for an agentsaga row, which targets it met: nothing
// spent past the cap, at least SpendMinUtilisation of it used, and every
// run ended in a stated status (completed, partial, waiting, escalated or
// failed, each but completed with its reason).
func SpendVerdicts(r SpendRow) (noOverspend, utilised, stated bool) {
	return r.OverspendUSD == 0, r.Utilisation >= SpendMinUtilisation, r.stated() == r.Runs && r.Unexplained == 0
}

// stated is how many runs ended in a stated status, or wait queued.
func (r SpendRow) stated() int {
	return r.Completed + r.Partial + r.Waiting + r.Escalated + r.Failed + r.Queued
}

// GoodputVerdicts says, for a row, which of issue 43's targets it met: at
// least SpendMinGoodput of the runs the cap pays for completed, every
// other run queued (none cut short), and, after the resets, every queued
// run completed with no period's spend past the cap.
func GoodputVerdicts(r SpendRow) (goodput, othersQueued, drained bool) {
	drained = len(r.Resets) > 0 && r.Resets[len(r.Resets)-1].Queued == 0
	for _, p := range r.Resets {
		drained = drained && p.SpentUSD <= r.CapUSD+spendEpsilon
	}
	return r.Goodput >= SpendMinGoodput, r.Completed+r.Queued == r.Runs, drained || (r.Queued == 0 && len(r.Resets) == 0)
}

func (cfg SpendConfig) validate() error {
	if cfg.Runs < 1 || cfg.CapUSD <= 0 || cfg.RunUSD <= 0 || cfg.ToolCalls < 0 || cfg.USDPerMillion <= 0 || cfg.MaxTokens < 1 ||
		cfg.CompletionTokens < 1 || cfg.CompletionTokens > cfg.MaxTokens || len(cfg.Processes) == 0 || cfg.PoolMaxConns < 1 ||
		cfg.Timeout <= 0 || !cfg.ordered() {
		return fmt.Errorf("%s: runs %d, cap $%v, run budget $%v, price %v, max tokens %d (a reply uses %d), processes %v, pool %d and timeout %v must be positive, and the latency %v-%v ordered",
			spendLabel, cfg.Runs, cfg.CapUSD, cfg.RunUSD, cfg.USDPerMillion, cfg.MaxTokens, cfg.CompletionTokens, cfg.Processes, cfg.PoolMaxConns, cfg.Timeout,
			cfg.LatencyMin, cfg.LatencyMax)
	}
	return cfg.contest.validate(spendLabel, spendContenderNames, cfg.Processes...)
}

// Spend runs each contender on each process count, on a dev server in
// memory started from cfg.TemporalBin, with worker processes of
// cfg.Executable (`agentsaga bench spend-worker`).
func Spend(ctx context.Context, cfg SpendConfig) (SpendResult, error) {
	return inScratchDir(spendLabel, "spend", cfg.validate(), SpendResult{Config: cfg}, func(dir string, result *SpendResult) error {
		server, err := startBenchServer(ctx, cfg.TemporalBin, dir, serverOptions{})
		if err != nil {
			return fmt.Errorf("%s: %w", spendLabel, err)
		}
		defer server.stop()
		m := spendMeasurement{cfg: cfg, server: server, dir: dir}

		// One run alone, first, on the same provider: what the cap is divided
		// by to count the runs it pays for.
		alone := m
		alone.cfg.Runs = 1
		row, err := alone.measure(ctx, SpendPerRun, 1)
		if err != nil {
			return err
		}
		if row.Completed != 1 || row.SpentUSD <= 0 {
			return fmt.Errorf("%s: one run alone did not complete (%v, $%.4f)", spendLabel, row.Outcomes, row.SpentUSD)
		}
		result.AloneUSD = row.SpentUSD
		result.Payable = int(math.Floor(cfg.CapUSD/row.SpentUSD + spendEpsilon))
		for _, n := range cfg.Processes {
			for _, contender := range cfg.Contenders {
				row, err := m.measure(ctx, contender, n)
				if err != nil {
					return err
				}
				row.Payable = result.Payable
				if row.Payable > 0 {
					row.Goodput = float64(row.Completed) / float64(row.Payable)
				}
				result.Rows = append(result.Rows, row)
			}
		}
		return nil
	})
}

type spendMeasurement struct {
	cfg    SpendConfig
	server *benchServer
	dir    string
}

func (m spendMeasurement) measure(ctx context.Context, contender string, processes int) (SpendRow, error) {
	cfg := m.cfg
	row := SpendRow{Contender: spendContenderNames[contender], Processes: processes, Runs: cfg.Runs, CapUSD: cfg.CapUSD,
		Outcomes: map[string]int{}, Reasons: map[string]string{}}
	label := fmt.Sprintf("%d processes, %s", processes, row.Contender)
	fail := func(err error) (SpendRow, error) { return row, fmt.Errorf("%s: %s: %w", spendLabel, label, err) }
	db, err := newBenchDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return fail(err)
	}
	defer db.drop()
	if err := m.prepare(ctx, db, contender); err != nil {
		return fail(err)
	}
	provider, err := startSpendProvider(cfg)
	if err != nil {
		return fail(err)
	}
	defer provider.Close()

	queue := "bench-spend-" + nonce()
	args := []string{"bench", "spend-worker", "--task-queue", queue}
	if contender == SpendCheck {
		args = append(args, "--account", spendAccount, "--cap-usd", strconv.FormatFloat(cfg.CapUSD, 'f', -1, 64),
			"--usd-per-million", strconv.FormatFloat(cfg.USDPerMillion, 'f', -1, 64))
	}
	env := m.server.workerEnv("DATABASE_URL=" + db.workerURL(cfg.PoolMaxConns))
	prefix := fmt.Sprintf("spend-%s-%d-%s", contender, processes, nonce())
	procs, err := startWorkerProcesses(ctx, cfg.Executable, args, env, filepath.Join(m.dir, prefix), processes, SpendWorkerReady)
	defer func() { _ = procs.stop() }()
	if err != nil {
		return fail(err)
	}
	spec, err := SpendSpec(cfg, provider.URL(), contender)
	if err != nil {
		return fail(err)
	}
	opts := agentsaga.StartOptions{TaskQueue: queue, SkipLedgerCheck: true}
	if contender == SpendCheck {
		opts.ModelProviders = []string{SpendCheckProvider}
	}

	poll, err := connectSimple(ctx, db.url)
	if err != nil {
		return fail(err)
	}
	defer poll.Close(context.Background())
	var store *ledgerdb.Store
	if contender == SpendAgentsaga {
		if store, err = ledgerdb.Open(ctx, db.url); err != nil {
			return fail(err)
		}
		defer store.Close()
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	began := time.Now()
	ids := runIDs(prefix, cfg.Runs)
	for _, id := range ids {
		if _, err := agentsaga.Start(runCtx, m.server.c, id, spec, opts); err != nil {
			return fail(fmt.Errorf("start %s: %w", id, err))
		}
	}
	runs, err := settleSpendRuns(ctx, runCtx, poll, store, ids)
	if err != nil {
		return fail(err)
	}
	row.Seconds = time.Since(began).Seconds()
	for _, id := range ids {
		r := runs[id]
		row.count(spendOutcome(r.status, r.detail), cmpNonEmpty(r.reason, r.detail))
	}
	counts := provider.Counts()
	row.Requests, row.PromptTokens, row.CompletionTokens = counts.Answered, counts.PromptTokens, counts.CompletionTokens
	row.SpentUSD = spendUSD(counts.PromptTokens, counts.CompletionTokens, cfg.USDPerMillion, cfg.USDPerMillion)
	row.Series = provider.Series(began)
	row.spendFigures()
	if err := m.books(ctx, db, contender, &row); err != nil {
		return fail(err)
	}
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "spend: %s: $%.2f spent of a $%.2f cap (%.0f%%) in %d model turns; runs %v; %.1f s\n",
			label, row.SpentUSD, row.CapUSD, 100*row.Utilisation, row.Requests, row.Outcomes, row.Seconds)
	}
	// The queued runs wait for room: a period reset gives it, one period
	// at a time, until none waits.
	for queued := row.Queued; len(row.Resets) < cfg.Resets && queued > 0 && runCtx.Err() == nil; queued = row.Resets[len(row.Resets)-1].Queued {
		before, from := counts, time.Now()
		if err := resetSpendPeriod(ctx, poll, spendAccount, len(row.Resets)+1); err != nil {
			return fail(err)
		}
		if runs, err = settleSpendRuns(ctx, runCtx, poll, store, ids); err != nil {
			return fail(err)
		}
		counts = provider.Counts()
		p := SpendReset{Requests: counts.Answered - before.Answered, Seconds: time.Since(from).Seconds(),
			SpentUSD: spendUSD(counts.PromptTokens-before.PromptTokens, counts.CompletionTokens-before.CompletionTokens, cfg.USDPerMillion, cfg.USDPerMillion)}
		for _, id := range ids {
			switch runs[id].status {
			case agentsagatype.RunCompleted:
				p.Completed++
			case agentsagatype.RunQueued:
				p.Queued++
			}
		}
		p.Completed -= row.Completed
		for _, q := range row.Resets {
			p.Completed -= q.Completed
		}
		row.Resets = append(row.Resets, p)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "spend: %s: after period reset %d: %d more runs completed for $%.2f in %d model turns, %d still queued; %.1f s\n",
				label, len(row.Resets), p.Completed, p.SpentUSD, p.Requests, p.Queued, p.Seconds)
		}
		if p.Completed == 0 {
			break
		}
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 30*time.Second)
	for _, id := range ids {
		switch runs[id].status {
		case agentsagatype.RunCompleted, agentsagatype.RunPartial, agentsagatype.RunFailed, agentsagatype.RunCompensated, agentsagatype.RunNeedsAttention:
		default:
			// Escalated, waiting, queued or not ended: stopped, so that
			// the workers can stop.
			_ = m.server.c.TerminateWorkflow(stopCtx, id, "", "the bench's measurement ended")
		}
	}
	stopCancel()
	if store != nil {
		a, err := spendAdmission(ctx, poll, "")
		if err != nil {
			return fail(err)
		}
		row.Admission = &a
	}
	poll.Close(ctx)
	if err := procs.stop(); err != nil {
		return fail(err)
	}
	return row, nil
}

// spendRun is a run's row in the ledger.
type spendRun struct{ status, detail, reason string }

// settleSpendRuns polls the ledger until none of the runs is open: each
// recorded, and none running or awaiting approval (runCtx ending stops
// the wait). With store (admission by run), a settled ledger with runs
// queued gets one admission pass of its own before the wait ends: room
// may have freed a moment ago, with the engine's pass still to come; a
// pass that admits a run (the engine's loops are told) keeps it waiting.
func settleSpendRuns(ctx, runCtx context.Context, poll *pgx.Conn, store *ledgerdb.Store, ids []string) (map[string]spendRun, error) {
	// quiet: the last look found nothing open and a pass of its own
	// admitted nothing; the runs are settled if the next look (after any
	// pass the engine ran meanwhile) finds nothing open either.
	quiet := false
	for {
		rows, err := poll.Query(ctx, `SELECT workflow_id, status, status_detail, reason FROM runs`)
		if err != nil {
			return nil, fmt.Errorf("read the runs: %w", err)
		}
		runs := map[string]spendRun{}
		for rows.Next() {
			var id string
			var r spendRun
			if err := rows.Scan(&id, &r.status, &r.detail, &r.reason); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read the runs: %w", err)
			}
			runs[id] = r
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read the runs: %w", err)
		}
		open, queued := 0, 0
		for _, id := range ids {
			r, ok := runs[id]
			switch {
			case !ok || r.status == agentsagatype.RunRunning || r.status == agentsagatype.RunAwaitingApproval:
				open++
			case r.status == agentsagatype.RunQueued:
				queued++
			}
		}
		if open == 0 && queued > 0 && store != nil && runCtx.Err() == nil && !quiet {
			root := ledgerdb.RootAccount(spendAccount)
			n, err := store.AdmitQueued(ctx, root)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				if _, err := poll.Exec(ctx, `SELECT pg_notify($1, $2)`, ledgerdb.AdmissionChannel, root); err != nil {
					return nil, fmt.Errorf("notify the admission loops: %w", err)
				}
				open += n
			}
			quiet = n == 0
			if quiet {
				open++ // look once more
			}
		} else if open > 0 {
			quiet = false
		}
		if open == 0 || runCtx.Err() != nil {
			return runs, nil
		}
		select {
		case <-runCtx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// resetSpendPeriod moves the clock of the account's caps on by a period,
// as a test's fake clock would: the current period's rows are moved back
// by n months (the nth reset), behind the rows of the resets before, so
// that a new period starts with nothing spent. Then the admission loops
// are told, as a reset's timer tells them.
func resetSpendPeriod(ctx context.Context, conn *pgx.Conn, account string, n int) error {
	if _, err := conn.Exec(ctx, `UPDATE spend_periods SET starts = starts - make_interval(months => $2), resets = resets - make_interval(months => $2)
		WHERE account = $1 AND period = $3 AND resets > clock_timestamp()`, account, n, ledgerdb.SpendMonth); err != nil {
		return fmt.Errorf("reset the spend period of %s: %w", account, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_notify($1, $2)`, ledgerdb.AdmissionChannel, ledgerdb.RootAccount(account)); err != nil {
		return fmt.Errorf("notify the admission loops: %w", err)
	}
	return nil
}

// spendAdmission reads the admission queue's books, leaving out the runs
// whose IDs start with except (when it is not empty).
func spendAdmission(ctx context.Context, conn *pgx.Conn, except string) (SpendAdmission, error) {
	var a SpendAdmission
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE admitted_at IS NOT NULL), count(*) FILTER (WHERE status = 'admitted'),
		coalesce(sum(held), 0)::float8, (SELECT coalesce(sum(reserved), 0)::float8 FROM spend_periods)
		FROM run_admissions WHERE $1 = '' OR NOT starts_with(run_id, $1)`, except).
		Scan(&a.Admitted, &a.StillAdmitted, &a.HeldUSD, &a.ReservedUSD); err != nil {
		return a, fmt.Errorf("read the admission queue: %w", err)
	}
	return a, nil
}

func cmpNonEmpty(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return a
	}
	return b
}

// prepare sets the agentsaga contender's cap in the ledger, and makes the
// check-then-record contender's book of the account's spend.
func (m spendMeasurement) prepare(ctx context.Context, db *benchDatabase, contender string) error {
	switch contender {
	case SpendAgentsaga, SpendAgentsagaTurn:
		store, err := ledgerdb.Open(ctx, db.url)
		if err != nil {
			return err
		}
		defer store.Close()
		if _, err = store.SetSpendCap(ctx, ledgerdb.SpendCap{Account: spendAccount, Period: ledgerdb.SpendMonth, USD: m.cfg.CapUSD,
			OnExhausted: agentsagatype.OnExhaustedFinish}, "bench"); err != nil {
			return err
		}
		if contender == SpendAgentsagaTurn {
			// The cap's admit column (migration 00029): shared out turn by
			// turn, as before admission by run.
			_, err = store.Pool().Exec(ctx, `UPDATE spend_caps SET admit = 'turn' WHERE account = $1`, spendAccount)
		}
		return err
	case SpendCheck:
		conn, err := pgx.Connect(ctx, db.url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `CREATE TABLE `+spendTable+` (account text PRIMARY KEY, spent numeric NOT NULL DEFAULT 0);
			INSERT INTO `+spendTable+` (account) VALUES ('`+spendAccount+`')`)
		return err
	}
	return nil
}

// books reads what the contender's own accounting says it spent: the
// ledger's spend periods (agentsaga), the gateway's table
// (check-then-record).
func (m spendMeasurement) books(ctx context.Context, db *benchDatabase, contender string, row *SpendRow) error {
	switch contender {
	case SpendAgentsaga, SpendAgentsagaTurn:
		store, err := ledgerdb.Open(ctx, db.url)
		if err != nil {
			return err
		}
		defer store.Close()
		periods, err := store.SpendPeriods(ctx, spendAccount, time.Time{})
		if err != nil {
			return err
		}
		spent, reserved := 0.0, 0.0
		for _, p := range periods {
			spent += p.Spent
			reserved += p.Reserved
		}
		row.LedgerSpentUSD, row.LedgerReservedUSD = &spent, &reserved
	case SpendCheck:
		conn, err := pgx.Connect(ctx, db.url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var spent float64
		if err := conn.QueryRow(ctx, `SELECT spent::float8 FROM `+spendTable+` WHERE account = $1`, spendAccount).Scan(&spent); err != nil {
			return err
		}
		row.GatewaySpentUSD = &spent
	}
	return nil
}

// SpendSpec is every contender's run: the model at url, priced at
// cfg.USDPerMillion, the built-in word_count tool, a budget of RunUSD of
// its own; charged to the capped account for the agentsaga contender,
// through the check-then-record gateway (SpendCheckProvider) for that
// one.
func SpendSpec(cfg SpendConfig, url, contender string) (agentsaga.RunSpec, error) {
	account := ""
	if contender == SpendAgentsaga || contender == SpendAgentsagaTurn {
		account = spendAccount
	}
	spec, err := spendRunSpec(cfg, url, account)
	if err != nil {
		return spec, err
	}
	if contender == SpendCheck {
		// Set after parsing: ParseSpec knows the built-in providers only;
		// Start checks it against StartOptions.ModelProviders.
		spec.Model.Provider = SpendCheckProvider
	}
	return spec, nil
}

// spendRunSpec is the spend scenario's run, charged to account when it is
// not empty.
func spendRunSpec(cfg SpendConfig, url, account string) (agentsaga.RunSpec, error) {
	if account != "" {
		account = ", account: " + account
	}
	return parseRunSpec(spendLabel, fmt.Sprintf(`
goal: %q
system: %q
budget: {steps: %d, seconds: %d, usd: %v%s}
model: {provider: %s, name: %s, base_url: %q, max_tokens: %d}
prices: {models: {%[8]s: {input_per_million: %[11]v, output_per_million: %[11]v}}}
%[12]s`, spendGoal(cfg.GoalChars), spendSystem, 4*(cfg.ToolCalls+1), int((3*cfg.Timeout).Seconds()), cfg.RunUSD, account,
		agentsagatype.ProviderOpenAI, spendModel, url, cfg.MaxTokens, cfg.USDPerMillion, wordCountTool))
}

// spendGoal is a goal of about chars characters.
func spendGoal(chars int) string {
	return wordCountGoal(chars, "The notes follow. ", "Note %d says that the support queue was answered within the hour and checked twice. ")
}

// SpendProviderCounts is what the fake provider answered and counted.
type SpendProviderCounts struct {
	Answered         int64 `json:"answered"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// spendProvider is an OpenAI-compatible chat.completions server on
// loopback: it asks for word_count until the conversation holds
// ToolCalls results, then answers (a request without tools, a graceful
// finish, gets a partial answer), after LatencyMin..LatencyMax. Each reply
// reports the request's prompt as the provider counts it (requestTokens:
// o200k) and CompletionTokens, which the provider counts as answered. A
// reply is streamed when the request asks, as the engine's do.
type spendProvider struct {
	cfg SpendConfig
	loopback

	mu     sync.Mutex
	random *rand.Rand
	counts SpendProviderCounts
	// bills is each reply's cost at the bench's price, in the order billed.
	bills []spendBill
	// firsts is when the first request of each conversation (by its first
	// user message: a run's goal) arrived.
	firsts map[string]time.Time
}

// spendBill is one reply the provider billed: when, and what it cost.
type spendBill struct {
	at  time.Time
	usd float64
}

func startSpendProvider(cfg SpendConfig) (*spendProvider, error) {
	p := &spendProvider{cfg: cfg, random: rand.New(rand.NewPCG(3, 1)), firsts: map[string]time.Time{}}
	if err := p.serve("127.0.0.1:0", p); err != nil {
		return nil, fmt.Errorf("spend provider: %w", err)
	}
	return p, nil
}

// URL is the base URL a client is given.
func (p *spendProvider) URL() string { return p.loopback.URL() + "/v1" }

// FirstRequest is when the first request whose first user message is
// goal arrived.
func (p *spendProvider) FirstRequest(goal string) (time.Time, bool) {
	content, _ := json.Marshal(goal)
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.firsts[string(content)]
	return at, ok
}

// Counts is what the provider has answered and counted so far.
func (p *spendProvider) Counts() SpendProviderCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// Series is what the provider had billed in all after each reply, from
// began (at 0 s, nothing).
func (p *spendProvider) Series(began time.Time) []SpendPoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	series := make([]SpendPoint, 0, len(p.bills)+1)
	series = append(series, SpendPoint{})
	total := 0.0
	for _, b := range p.bills {
		total += b.usd
		series = append(series, SpendPoint{Seconds: max(b.at.Sub(began).Seconds(), 0), USD: total})
	}
	return series
}

func (p *spendProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		providerError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", "Unknown request URL: "+r.Method+" "+r.URL.Path)
		return
	}
	req, body, ok := readChatRequest(w, r, nil)
	if !ok {
		return
	}
	arrived := time.Now()
	prompt, completion := int64(requestTokens(req, body)), p.cfg.CompletionTokens
	if limit := req.maxTokens(); limit >= 0 {
		completion = min(completion, limit)
	}
	p.mu.Lock()
	for _, m := range req.Messages {
		if m.Role == "user" {
			if _, seen := p.firsts[string(m.Content)]; !seen {
				p.firsts[string(m.Content)] = arrived
			}
			break
		}
	}
	latency := p.cfg.draw(p.random)
	p.mu.Unlock()
	select {
	case <-r.Context().Done():
		return // abandoned before the reply: not billed
	case <-time.After(latency):
	}
	results := 0
	for _, m := range req.Messages {
		if m.Role == "tool" {
			results++
		}
	}
	var message, finish string
	switch {
	case len(req.Tools) == 0:
		message, finish = `{"role":"assistant","content":"PARTIAL ANSWER: some words counted.\nHANDOFF NOTE: the budget ran out; count the rest.","refusal":null}`, "stop"
	case results >= p.cfg.ToolCalls:
		message, finish = fmt.Sprintf(`{"role":"assistant","content":"Done: %d word counts made, all answered.","refusal":null}`, results), "stop"
	default:
		// Each turn's text has a word more, so that every result is news
		// to agentsaga's no-progress watchdog.
		args, _ := json.Marshal(fmt.Sprintf(`{"text":"turn %d: count the words of this sentence%s"}`, results+1, strings.Repeat(" again", results+1)))
		message = fmt.Sprintf(`{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"call_spend_%d","type":"function","function":{"name":%q,"arguments":%s}}]}`,
			results+1, rateLimitTool, args)
		finish = "tool_calls"
	}
	p.mu.Lock()
	p.counts.Answered++
	p.counts.PromptTokens += prompt
	p.counts.CompletionTokens += completion
	p.bills = append(p.bills, spendBill{at: time.Now(), usd: spendUSD(prompt, completion, p.cfg.USDPerMillion, p.cfg.USDPerMillion)})
	p.mu.Unlock()
	reply := fmt.Sprintf(`{"id":"chatcmpl-spend","object":"chat.completion","created":%d,"model":%q,`+
		`"choices":[{"index":0,"message":%s,"logprobs":null,"finish_reason":%q}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		time.Now().Unix(), spendModel, message, finish, prompt, completion, prompt+completion)
	_ = agentsagatest.WriteReply(w, body, []byte(reply))
}

// checkThenRecord is the check-then-record contender, as LiteLLM's proxy
// enforces a budget: before each call it reads what the account has spent
// and refuses the call (HTTP 400, budget_exceeded) when that is at or over
// the cap; after the call answers it adds the call's cost, priced from the
// usage the provider reported. The read and the write are separate
// statements with the call between them, as in any gateway: calls in
// flight are not counted until they answer. (LiteLLM writes the spend in
// batches, seconds later; this writes it as each call answers, which
// favours it.)
type checkThenRecord struct {
	inner         activities.Model
	pool          *pgxpool.Pool
	account       string
	capUSD, price float64
	refused       *atomic.Int64
}

func (m *checkThenRecord) Turn(ctx context.Context, req activities.ModelRequest) (agentsagatype.ModelTurn, error) {
	var spent float64
	if err := m.pool.QueryRow(ctx, `SELECT spent::float8 FROM `+spendTable+` WHERE account = $1`, m.account).Scan(&spent); err != nil {
		return agentsagatype.ModelTurn{}, fmt.Errorf("check-then-record: read the spend of %s: %w", m.account, err)
	}
	if spent >= m.capUSD {
		m.refused.Add(1)
		body, _ := json.Marshal(map[string]any{"error": map[string]any{"type": "budget_exceeded", "code": "400",
			"message": fmt.Sprintf("Budget has been exceeded! Current cost: %.4f, Max budget: %.2f", spent, m.capUSD)}})
		return agentsagatype.ModelTurn{}, &activities.HTTPError{Op: "check-then-record chat.completions", StatusCode: http.StatusBadRequest, Body: string(body)}
	}
	turn, err := m.inner.Turn(ctx, req)
	if err != nil {
		return turn, err
	}
	cost := spendUSD(turn.Usage.InputTokens, turn.Usage.OutputTokens, m.price, m.price)
	if _, err := m.pool.Exec(ctx, `UPDATE `+spendTable+` SET spent = spent + $2 WHERE account = $1`, m.account, cost); err != nil {
		// A gateway logs a failed spend write and still answers.
		slog.Default().Warn("check-then-record: record the spend", "account", m.account, "error", err)
	}
	return turn, nil
}

// SpendWorkerConfig is one `agentsaga bench spend-worker` process: an
// agentsaga worker on Queue whose ledger is at DatabaseURL; with Account,
// it also serves SpendCheckProvider, capped at CapUSD and pricing tokens
// at USDPerMillion.
type SpendWorkerConfig struct {
	Queue         string
	DatabaseURL   string
	Account       string
	CapUSD        float64
	USDPerMillion float64
	// MaxActivities bounds the activities the worker runs at once (the
	// SDK's MaxConcurrentActivityExecutionSize); 0 keeps the SDK's.
	MaxActivities int
}

// RunSpendWorker runs one worker process of the spend scenario until ctx
// ends: the engine as `agentsaga worker` runs it (worker.New), with no
// reconciler, metrics or pruning, and the check-then-record provider.
func RunSpendWorker(ctx context.Context, out io.Writer, c client.Client, cfg SpendWorkerConfig) error {
	store, err := ledger.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("bench: spend-worker: %w", err)
	}
	defer store.Close()
	var refused atomic.Int64
	models := map[string]agentsaga.ModelFactory{}
	if cfg.Account != "" {
		pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
		if err != nil {
			return fmt.Errorf("bench: spend-worker: %w", err)
		}
		defer pool.Close()
		models[SpendCheckProvider] = func(spec agentsaga.ModelSpec, apiKey string, httpClient *http.Client) (agentsaga.Model, error) {
			spec.Provider = agentsagatype.ProviderOpenAI
			inner, err := activities.NewOpenAIModel(spec, apiKey, httpClient)
			if err != nil {
				return nil, err
			}
			return &checkThenRecord{inner: inner, pool: pool, account: cfg.Account, capUSD: cfg.CapUSD, price: cfg.USDPerMillion, refused: &refused}, nil
		}
	}
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: cfg.Queue, Models: models},
		Worker: sdkworker.Options{MaxConcurrentActivityExecutionSize: cfg.MaxActivities}})
	if err != nil {
		return fmt.Errorf("bench: spend-worker: %w", err)
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("bench: spend-worker: start on task queue %q: %w", cfg.Queue, err)
	}
	fmt.Fprintf(out, "%s task queue %q\n", SpendWorkerReady, cfg.Queue)
	<-ctx.Done()
	w.Stop()
	fmt.Fprintf(out, "spend-worker: stopped; check-then-record refused %d calls\n", refused.Load())
	return nil
}

// spendNotes explain the spend table's columns.
const spendNotes = `
  SPENT: the provider's counted usage at the bench's price, in the cap's period (before any reset); OVERSPEND: spent past the cap; OF CAP: spent over the cap;
  TURNS: model turns the provider answered; PAYABLE: the cap over what one run alone costs, rounded down; GOODPUT: COMPLETED over PAYABLE
    (a figure only with $0.00 over: a contender that overspends completes more runs than the cap pays for); QUEUED: runs waiting for admission;
  PARTIAL: runs that finished gracefully; OTHER: runs not ended at the timeout, or ended otherwise;
  STATEMENTS A TURN: a model turn's ledger statements as TestStatementsPerSuccessfulCall counts them, not measured here: 2 (the claim,
    which holds agentsaga's reservation, and the settle, which settles it), plus the gateway's SELECT and UPDATE for check-then-record
`

// PrintSpend writes the table and the agentsaga rows' targets.
func PrintSpend(out io.Writer, result SpendResult) {
	cfg := result.Config
	fmt.Fprintf(out, "\nspend: %d runs at once, all charged to ONE account with a $%.2f cap, each with a budget of its own of $%.2f; %d word_count calls then an answer a run;\n",
		cfg.Runs, cfg.CapUSD, cfg.RunUSD, cfg.ToolCalls)
	fmt.Fprintf(out, "  a fake OpenAI-compatible provider counts each prompt with o200k (+4 tokens a message) and reports it, %d completion tokens a reply (max_tokens %d),\n",
		cfg.CompletionTokens, cfg.MaxTokens)
	fmt.Fprintf(out, "  answered in %v-%v; the bench prices that usage at $%v per million tokens each way, the price every spec and the gateway use\n",
		cfg.LatencyMin, cfg.LatencyMax, cfg.USDPerMillion)
	fmt.Fprintf(out, "  %s: budget.usd per run, no account; %s: a custom model provider on the workers that SELECTs the account's spend\n", SpendPerRunContender, SpendCheckContender)
	fmt.Fprintf(out, "    before each call, refuses at or over the cap (HTTP 400 budget_exceeded), and UPDATEs it by the call's cost after (as LiteLLM);\n")
	fmt.Fprintf(out, "  %s: budget.account %s with a $%.2f a month cap (ledger.SetSpendCap, on_exhausted finish), runs admitted whole or queued (admit: run, the default);\n",
		SpendAgentsagaContender, spendAccount, cfg.CapUSD)
	fmt.Fprintf(out, "  %s: the same cap set to admit: turn, shared out a turn at a time\n", SpendAgentsagaTurnContender)
	fmt.Fprintf(out, "  one run alone (measured first, 1 process): $%.4f, so the cap pays for %d runs (PAYABLE)\n", result.AloneUSD, result.Payable)
	tw := newTable(out, "\n  PROCESSES\tCONTENDER\tSPENT\tCAP\tOVERSPEND\tOVER %\tOF CAP\tTURNS\tCOMPLETED\tPAYABLE\tGOODPUT\tQUEUED\tPARTIAL\tWAITING\tESCALATED\tFAILED\tOTHER\tSTATEMENTS A TURN\tSECONDS")
	for _, r := range result.Rows {
		stmts := "2"
		if r.Contender == SpendCheckContender {
			stmts = "2+2"
		}
		fmt.Fprintf(tw, "  %d\t%s\t$%.2f\t$%.2f\t$%.2f\t%.0f%%\t%.1f%%\t%d\t%d\t%d\t%.0f%%\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f\n",
			r.Processes, r.Contender, r.SpentUSD, r.CapUSD, r.OverspendUSD, 100*r.OverspendShare, 100*r.Utilisation, r.Requests,
			r.Completed, r.Payable, 100*r.Goodput, r.Queued, r.Partial, r.Waiting, r.Escalated, r.Failed, r.Runs-r.stated(), stmts, r.Seconds)
	}
	tw.Flush()
	for _, r := range result.Rows {
		switch {
		case r.LedgerSpentUSD != nil:
			fmt.Fprintf(out, "  %s, %d processes: the ledger's spend periods hold $%.4f spent and $%.4f reserved (the provider's usage: $%.4f)\n",
				r.Contender, r.Processes, *r.LedgerSpentUSD, *r.LedgerReservedUSD, r.SpentUSD)
		case r.GatewaySpentUSD != nil:
			fmt.Fprintf(out, "  %s, %d processes: the gateway's table holds $%.4f spent (the provider's usage: $%.4f)\n",
				r.Contender, r.Processes, *r.GatewaySpentUSD, r.SpentUSD)
		}
	}
	for _, r := range result.Rows {
		for i, p := range r.Resets {
			fmt.Fprintf(out, "  %s, %d processes: period reset %d: %d more runs completed, $%.2f spent of the new period's $%.2f (%d model turns), %d still queued, %.1f s\n",
				r.Contender, r.Processes, i+1, p.Completed, p.SpentUSD, r.CapUSD, p.Requests, p.Queued, p.Seconds)
		}
		if r.Contender == SpendAgentsagaContender && r.Completed > 0 {
			fmt.Fprintf(out, "  %s, %d processes: a completed run cost $%.4f on average in the cap's period (one alone: $%.4f)\n",
				r.Contender, r.Processes, r.SpentUSD/float64(r.Completed), result.AloneUSD)
		}
		if r.QueuedBehind > 0 {
			fmt.Fprintf(out, "  %s, %d processes: %d of the %d queued runs have no reason in the ledger's run row (runs.status_detail): a pass writes why to the first run that does not fit, not to those behind it\n",
				r.Contender, r.Processes, r.QueuedBehind, r.Queued)
		}
		if a := r.Admission; a != nil {
			fmt.Fprintf(out, "  %s, %d processes: at the end, %d runs were ever admitted, %d still admitted, $%.4f held as run reservations, $%.4f reserved in the spend periods\n",
				r.Contender, r.Processes, a.Admitted, a.StillAdmitted, a.HeldUSD, a.ReservedUSD)
		}
	}
	seen := map[string]bool{}
	for _, r := range result.Rows {
		for _, outcome := range slices.Sorted(maps.Keys(r.Reasons)) {
			if key := r.Contender + "/" + outcome; !seen[key] {
				seen[key] = true
				fmt.Fprintf(out, "  %s, a %s run's reason: %s\n", r.Contender, outcome, clipText(strings.Join(strings.Fields(r.Reasons[outcome]), " "), 300))
			}
		}
	}
	for _, r := range result.Rows {
		if r.Contender != SpendAgentsagaContender && r.Contender != SpendAgentsagaTurnContender {
			continue
		}
		noOver, utilised, stated := SpendVerdicts(r)
		fmt.Fprintf(out, "  TARGET %s, %d processes: overspend $%.2f = $0.00 (%s); %.1f%% of the cap >= 95%% (%s); %d of %d runs ended in a stated status or queued (%s)\n",
			r.Contender, r.Processes, r.OverspendUSD, verdict(noOver), 100*r.Utilisation, verdict(utilised),
			r.stated()-r.Unexplained, r.Runs, verdict(stated))
		goodput, othersQueued, drained := GoodputVerdicts(r)
		fmt.Fprintf(out, "  TARGET %s, %d processes: goodput %d of %d payable = %.0f%% >= 90%% (%s); the other %d runs queued, not cut short (%s); after %d period resets, every queued run completed, no period over its cap (%s)\n",
			r.Contender, r.Processes, r.Completed, r.Payable, 100*r.Goodput, verdict(goodput), r.Runs-r.Completed, verdict(othersQueued), len(r.Resets), verdict(drained))
	}
	fmt.Fprint(out, spendNotes)
}

// SpendChart writes to path a PNG of the account's spend over time, one
// panel per process count: per contender, what the provider had billed
// the account since the runs started (a step at each reply), against the
// cap (a dashed line), with the room above the cap shaded, so that an
// overspend is a line that enters it. Every panel has the same axes.
func SpendChart(path string, rows []SpendRow) error {
	processes := distinct(rows, func(r SpendRow) int { return r.Processes })
	contenders := distinct(rows, func(r SpendRow) string { return r.Contender })
	maxX, maxY, capUSD := 1.0, 0.0, 0.0
	for _, r := range rows {
		capUSD = max(capUSD, r.CapUSD)
		maxY = max(maxY, r.SpentUSD, r.CapUSD)
		for _, pt := range r.Series {
			maxX, maxY = max(maxX, pt.Seconds), max(maxY, pt.USD)
		}
	}
	maxY *= 1.3 // headroom for the legend
	plots := make([]*plot.Plot, 0, len(processes))
	for _, n := range processes {
		p := plot.New()
		runs := 0
		for _, r := range rows {
			if r.Processes == n {
				runs = max(runs, r.Runs)
			}
		}
		p.Title.Text = fmt.Sprintf("One account's spend: %d runs at once on %d worker processes", runs, n)
		p.X.Label.Text = "time since the runs started (s)"
		p.Y.Label.Text = "spent by the account (USD)"
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())

		// Past the cap: a light band, and the cap itself.
		band, err := plotter.NewPolygon(plotter.XYs{{X: 0, Y: capUSD}, {X: maxX, Y: capUSD}, {X: maxX, Y: maxY}, {X: 0, Y: maxY}})
		if err != nil {
			return fmt.Errorf("bench: spend chart: %w", err)
		}
		band.Color = color.RGBA{R: 0xfd, G: 0xf0, B: 0xf0, A: 0xff}
		band.LineStyle.Width = 0
		p.Add(band)
		if err := addTarget(p, plotter.XYs{{X: 0, Y: capUSD}, {X: maxX, Y: capUSD}},
			fmt.Sprintf("the account's cap, $%.2f (shaded above: overspend)", capUSD)); err != nil {
			return fmt.Errorf("bench: spend chart: %w", err)
		}

		for c, contender := range contenders {
			for _, r := range rows {
				if r.Processes != n || r.Contender != contender || len(r.Series) == 0 {
					continue
				}
				xys := make(plotter.XYs, len(r.Series))
				for i, pt := range r.Series {
					xys[i] = plotter.XY{X: pt.Seconds, Y: pt.USD}
				}
				line, _, err := addSeries(p, xys, c, vg.Points(2), vg.Points(3.5))
				if err != nil {
					return fmt.Errorf("bench: spend chart: %w", err)
				}
				line.StepStyle = plotter.PostStep
				figure := fmt.Sprintf("%.0f%% of the cap", 100*r.Utilisation)
				if r.OverspendUSD > 0 {
					figure = fmt.Sprintf("$%.2f over the cap", r.OverspendUSD)
				}
				p.Legend.Add(fmt.Sprintf("%s: $%.2f, %s, %d runs completed", r.Contender, r.SpentUSD, figure, r.Completed), line)
			}
		}
		p.X.Min, p.X.Max = 0, maxX*1.02
		p.Y.Min, p.Y.Max = 0, maxY
		p.X.Tick.Marker = plot.ConstantTicks(wholeTicks(maxX*1.02, "%g"))
		p.Y.Tick.Marker = plot.ConstantTicks(wholeTicks(maxY, "$%g"))
		plots = append(plots, p)
	}
	if err := saveTiledPNG(plots, path); err != nil {
		return fmt.Errorf("bench: spend chart: %w", err)
	}
	return nil
}

// wholeTicks labels an axis from 0 to top every 1, 2, 5, 10, 20 ... units,
// at most eight labels, each written by format.
func wholeTicks(top float64, format string) []plot.Tick {
	step := 1.0
	for i := 0; top/step > 8; i++ {
		step = []float64{2, 5, 10}[i%3] * math.Pow(10, float64(i/3))
	}
	var ticks []plot.Tick
	for v := 0.0; v <= top; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf(format, v)})
	}
	return ticks
}
