package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
)

// The fairness scenario (issue 43) asks whether one account's flood holds
// back another account's first run. Account A starts RunsA runs; once
// BAfter of them have ended, account B starts RunsB. Every run is one model
// turn against a fast fake provider (the spend scenario's), on worker
// processes of `agentsaga bench spend-worker`. The provider notes when
// each run's first request arrives: B's time to first turn is that, from
// just before its Start. Each measurement has a fresh database and fresh
// workers; the baselines (B alone on an idle fleet, A alone) are measured
// on each server the contenders use.

// The contenders, their short forms, and the servers.
const (
	FairnessFCFSContender     = "first come, first served"
	FairnessTemporalContender = "Temporal fairness keys"
	FairnessEngineContender   = "agentsaga round robin"
	FairnessBothContender     = "round robin on fairness keys"
	FairnessBurstContender    = "fairness keys, sparse accounts weighed up"

	FairnessFCFS     = "fcfs"
	FairnessTemporal = "temporal"
	FairnessEngine   = "round-robin"
	FairnessBoth     = "both"
	// FairnessBurst starts the runs with the ledger, as the engine and
	// the API do, so that Start weighs an account with few runs in flight
	// up (start.go's burstRuns).
	FairnessBurst = "burst"

	// FairnessDefaultServer is the dev server as it starts; the fairness
	// server is started with FairnessServerArgs.
	FairnessDefaultServer  = "dev server, default"
	FairnessFairnessServer = "dev server, fairness on"
)

var fairnessContenderNames = map[string]string{FairnessFCFS: FairnessFCFSContender, FairnessTemporal: FairnessTemporalContender,
	FairnessEngine: FairnessEngineContender, FairnessBoth: FairnessBothContender, FairnessBurst: FairnessBurstContender}

// FairnessServerArgs turn on task queue fairness on the 1.29 dev server:
// the new matcher, fairness, and one partition per task queue (the
// matcher balances keys within a partition; with four, a key's tasks land
// in any of them).
var FairnessServerArgs = []string{
	"--dynamic-config-value", "matching.useNewMatcher=true",
	"--dynamic-config-value", "matching.enableFairness=true",
	"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
	"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
}

// The accounts: two children of one root, whose queue the engine's round
// robin serves.
const (
	fairnessRoot     = "fleet"
	fairnessAccountA = "fleet/a"
	fairnessAccountB = "fleet/b"
	fairnessLabel    = "bench: fairness"
)

// FairnessConfig sizes the scenario.
type FairnessConfig struct {
	Processes int `json:"processes"`
	RunsA     int `json:"runs_a"`
	RunsB     int `json:"runs_b"`
	// BAfter is how many of A's runs must have ended before B starts.
	BAfter int `json:"b_after"`
	// MaxActivities bounds each worker process's activities at once (0:
	// the SDK's default, 1,000): a run's model turn holds one, so
	// Processes x MaxActivities is the fleet's capacity in runs.
	MaxActivities int `json:"max_activities"`
	// MaxConcurrentRuns is the root account's max_concurrent_runs for the
	// engine's round robin: the fleet's capacity, in runs (a run holds its
	// activity slot only for its turn: twice the slots keeps them busy).
	MaxConcurrentRuns int `json:"max_concurrent_runs"`
	// A run makes ToolCalls word_count calls, then answers; the provider
	// answers each turn in LatencyMin..LatencyMax.
	ToolCalls int `json:"tool_calls"`
	providerLatency
	contest
	ProcessScenario
}

// DefaultFairness is issue 43's: A starts 1,000 runs, then B 10, on 2
// worker processes; a run is one model turn answered in 400-600 ms, so
// that 2 processes of 8 activities are a fleet A floods.
var DefaultFairness = FairnessConfig{Processes: 2, RunsA: 1000, RunsB: 10, BAfter: 100, MaxActivities: 8, MaxConcurrentRuns: 32,
	providerLatency: providerLatency{LatencyMin: 400 * time.Millisecond, LatencyMax: 600 * time.Millisecond},
	contest:         contest{Contenders: []string{FairnessFCFS, FairnessTemporal, FairnessEngine, FairnessBoth, FairnessBurst}, PoolMaxConns: 8, Timeout: 4 * time.Minute}}

// fairnessWarmUp is the warm-up runs a worker process, before each
// measurement.
const fairnessWarmUp = 4

// Targets (issue 43).
const (
	FairnessMaxBSlowdown = 2.0
	FairnessMinAShare    = 0.9
)

// FairnessRun is one measurement: runsA of A's runs, then runsB of B's.
type FairnessRun struct {
	Server    string `json:"server"`
	Contender string `json:"contender,omitempty"`
	RunsA     int    `json:"runs_a"`
	RunsB     int    `json:"runs_b"`
	// BFirstTurnMs are B's runs' times to first turn, from just before
	// each Start to its first request at the provider, sorted.
	BFirstTurnMs []float64   `json:"b_first_turn_ms,omitempty"`
	BFirstTurn   Percentiles `json:"b_first_turn"`
	// BPhases says where B's time to first turn went.
	BPhases *FairnessPhases `json:"b_phases,omitempty"`
	// ASeconds is from A's first Start to its last run's end;
	// ARunsPerSecond is RunsA over it.
	ASeconds       float64 `json:"a_seconds,omitempty"`
	ARunsPerSecond float64 `json:"a_runs_per_second,omitempty"`
	// AEndedBeforeB is how many of A's runs had ended when B started.
	AEndedBeforeB int `json:"a_ended_before_b,omitempty"`
	// Outcomes counts every run by its ledger status at the end.
	Outcomes map[string]int `json:"outcomes"`
	// Admission is the admission queue's books at the end.
	Admission SpendAdmission `json:"admission"`
	Seconds   float64        `json:"seconds"`
}

// FairnessRow is a contender against its server's baselines.
type FairnessRow struct {
	Contender string      `json:"contender"`
	Server    string      `json:"server"`
	Run       FairnessRun `json:"run"`
	// BIdle and AAlone are the baselines on the same server.
	BIdle  Percentiles `json:"b_idle"`
	AAlone float64     `json:"a_alone_runs_per_second"`
	// BSlowdown is B's p95 over its idle p95; AShare A's runs a second
	// over A alone's.
	BSlowdown float64 `json:"b_slowdown"`
	AShare    float64 `json:"a_share"`
}

// FairnessResult is the scenario's figures.
type FairnessResult struct {
	Config    FairnessConfig `json:"config"`
	Baselines []FairnessRun  `json:"baselines"`
	Rows      []FairnessRow  `json:"rows"`
}

// FairnessVerdicts says which targets a row met.
func FairnessVerdicts(r FairnessRow) (bFast, aFast bool) {
	return r.BSlowdown > 0 && r.BSlowdown <= FairnessMaxBSlowdown, r.AShare >= FairnessMinAShare
}

func (cfg FairnessConfig) validate() error {
	if cfg.Processes < 1 || cfg.RunsA < 1 || cfg.RunsB < 1 || cfg.BAfter < 0 || cfg.BAfter >= cfg.RunsA || cfg.MaxConcurrentRuns < 1 || cfg.MaxActivities < 0 ||
		cfg.ToolCalls < 0 || !cfg.ordered() || cfg.PoolMaxConns < 1 || cfg.Timeout <= 0 {
		return fmt.Errorf("%s: processes %d, runs %d and %d, max_concurrent_runs %d, pool %d and timeout %v must be positive, B after %d of A's runs fewer than them, tool calls %d not negative, latency %v-%v ordered",
			fairnessLabel, cfg.Processes, cfg.RunsA, cfg.RunsB, cfg.MaxConcurrentRuns, cfg.PoolMaxConns, cfg.Timeout, cfg.BAfter, cfg.ToolCalls, cfg.LatencyMin, cfg.LatencyMax)
	}
	return cfg.contest.validate(fairnessLabel, fairnessContenderNames)
}

// spend is the provider's and the spec's configuration: the spend
// scenario's, a turn or ToolCalls+1 of them a run, no cap.
func (cfg FairnessConfig) spend() SpendConfig {
	s := DefaultSpend
	s.ToolCalls, s.providerLatency, s.GoalChars, s.Timeout = cfg.ToolCalls, cfg.providerLatency, 0, cfg.Timeout
	return s
}

// Fairness measures, on each server the contenders need (the default dev
// server for first come first served and the engine's round robin, one
// with fairness on for Temporal's keys), B alone on an idle fleet, A
// alone, then each contender.
func Fairness(ctx context.Context, cfg FairnessConfig) (FairnessResult, error) {
	return inScratchDir(fairnessLabel, "fairness", cfg.validate(), FairnessResult{Config: cfg}, func(dir string, result *FairnessResult) error {
		byServer := map[string][]string{}
		var servers []string
		for _, c := range cfg.Contenders {
			server := FairnessDefaultServer
			if c == FairnessTemporal || c == FairnessBoth || c == FairnessBurst {
				server = FairnessFairnessServer
			}
			if !slices.Contains(servers, server) {
				servers = append(servers, server)
			}
			byServer[server] = append(byServer[server], c)
		}
		for _, server := range servers {
			rows, baselines, err := fairnessOnServer(ctx, cfg, server, byServer[server], dir)
			if err != nil {
				return err
			}
			result.Baselines = append(result.Baselines, baselines...)
			result.Rows = append(result.Rows, rows...)
		}
		return nil
	})
}

func fairnessOnServer(ctx context.Context, cfg FairnessConfig, server string, contenders []string, dir string) ([]FairnessRow, []FairnessRun, error) {
	var args []string
	if server == FairnessFairnessServer {
		args = FairnessServerArgs
	}
	serverDir := filepath.Join(dir, nonce())
	if err := os.Mkdir(serverDir, 0o755); err != nil {
		return nil, nil, err
	}
	s, err := startBenchServer(ctx, cfg.TemporalBin, serverDir, serverOptions{extraArgs: args})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", fairnessLabel, err)
	}
	defer s.stop()
	m := fairnessMeasurement{cfg: cfg, server: s, dir: serverDir, serverName: server}
	idle, err := m.measure(ctx, "", 0, cfg.RunsB)
	if err != nil {
		return nil, nil, err
	}
	alone, err := m.measure(ctx, "", cfg.RunsA, 0)
	if err != nil {
		return nil, nil, err
	}
	var rows []FairnessRow
	for _, c := range contenders {
		run, err := m.measure(ctx, c, cfg.RunsA, cfg.RunsB)
		if err != nil {
			return nil, nil, err
		}
		row := FairnessRow{Contender: fairnessContenderNames[c], Server: server, Run: run, BIdle: idle.BFirstTurn, AAlone: alone.ARunsPerSecond}
		if idle.BFirstTurn.P95 > 0 {
			row.BSlowdown = run.BFirstTurn.P95 / idle.BFirstTurn.P95
		}
		if alone.ARunsPerSecond > 0 {
			row.AShare = run.ARunsPerSecond / alone.ARunsPerSecond
		}
		rows = append(rows, row)
	}
	return rows, []FairnessRun{idle, alone}, nil
}

type fairnessMeasurement struct {
	cfg        FairnessConfig
	server     *benchServer
	dir        string
	serverName string
}

// measure starts runsA of A's runs, then (once BAfter of them ended)
// runsB of B's, and waits for every one to end. The
// contender is "" for a baseline.
func (m fairnessMeasurement) measure(ctx context.Context, contender string, runsA, runsB int) (FairnessRun, error) {
	cfg := m.cfg
	run := FairnessRun{Server: m.serverName, Contender: fairnessContenderNames[contender], RunsA: runsA, RunsB: runsB, Outcomes: map[string]int{}}
	label := fmt.Sprintf("%s, %s, A %d runs, B %d runs", m.serverName, cmpNonEmpty(run.Contender, "baseline"), runsA, runsB)
	fail := func(err error) (FairnessRun, error) { return run, fmt.Errorf("%s: %s: %w", fairnessLabel, label, err) }
	db, err := newBenchDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		return fail(err)
	}
	defer db.drop()
	poll, err := connectSimple(ctx, db.url)
	if err != nil {
		return fail(err)
	}
	defer poll.Close(context.Background())
	if contender == FairnessEngine || contender == FairnessBoth {
		store, err := ledgerdb.Open(ctx, db.url)
		if err != nil {
			return fail(err)
		}
		err = store.SetAccountLimits(ctx, ledgerdb.AccountLimits{Account: fairnessRoot, MaxConcurrentRuns: cfg.MaxConcurrentRuns}, "bench")
		store.Close()
		if err != nil {
			return fail(err)
		}
	}
	provider, err := startSpendProvider(cfg.spend())
	if err != nil {
		return fail(err)
	}
	defer provider.Close()
	queue := "bench-fairness-" + nonce()
	prefix := fmt.Sprintf("fairness-%s-%s", cmpNonEmpty(contender, "baseline"), nonce())
	procs, err := startWorkerProcesses(ctx, cfg.Executable, []string{"bench", "spend-worker", "--task-queue", queue, "--max-activities", strconv.Itoa(cfg.MaxActivities)},
		m.server.workerEnv("DATABASE_URL="+db.workerURL(cfg.PoolMaxConns)), filepath.Join(m.dir, prefix), cfg.Processes, SpendWorkerReady)
	defer func() { _ = procs.stop() }()
	if err != nil {
		return fail(err)
	}
	base, err := spendRunSpec(cfg.spend(), provider.URL(), "")
	if err != nil {
		return fail(err)
	}
	opts := agentsaga.StartOptions{TaskQueue: queue, SkipLedgerCheck: true}
	if contender == FairnessBurst {
		store, err := ledger.Open(ctx, db.url)
		if err != nil {
			return fail(err)
		}
		defer store.Close()
		opts.Ledger = store
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	// Warm-up runs first, on an account of their own: a fresh worker's
	// first turns load the tokenizer and open its pool's connections,
	// which no measured run should pay.
	warm := runIDs(prefix+"-w", fairnessWarmUp*cfg.Processes)
	if err := fairnessStart(runCtx, m.server.c, warm, base, "warm-up", opts, len(warm), nil); err != nil {
		return fail(err)
	}
	if _, err := waitForRuns(ctx, runCtx, poll, prefix+"-w-", len(warm), len(warm)); err != nil {
		return fail(err)
	}
	began := time.Now()

	idsA := runIDs(prefix+"-a", runsA)
	if err := fairnessStart(runCtx, m.server.c, idsA, base, fairnessAccountA, opts, 8, nil); err != nil {
		return fail(err)
	}
	if runsB > 0 {
		if runsA > 0 {
			// A's flood is under way: BAfter of its runs ended.
			if run.AEndedBeforeB, err = waitForRuns(ctx, runCtx, poll, prefix+"-a-", 0, cfg.BAfter); err != nil {
				return fail(err)
			}
		}
		idsB := runIDs(prefix+"-b", runsB)
		starts := make([]time.Time, runsB)
		if err := fairnessStart(runCtx, m.server.c, idsB, base, fairnessAccountB, opts, runsB, starts); err != nil {
			return fail(err)
		}
		if _, err := waitForRuns(ctx, runCtx, poll, prefix+"-b-", runsB, runsB); err != nil {
			return fail(err)
		}
		firsts := make([]time.Time, runsB)
		for i, id := range idsB {
			first, ok := provider.FirstRequest(fairnessGoal(id))
			if !ok {
				return fail(fmt.Errorf("run %s ended without a request to the provider", id))
			}
			firsts[i] = first
			run.BFirstTurnMs = append(run.BFirstTurnMs, ms(first.Sub(starts[i])))
		}
		slices.Sort(run.BFirstTurnMs)
		run.BFirstTurn = percentiles(run.BFirstTurnMs)
		phases, err := fairnessPhases(ctx, m.server.c, idsB, starts, firsts)
		if err != nil {
			return fail(err)
		}
		run.BPhases = &phases
	}
	if _, err := waitForRuns(ctx, runCtx, poll, prefix+"-a-", runsA, runsA); err != nil {
		return fail(err)
	}
	run.Seconds = time.Since(began).Seconds()
	if runsA > 0 {
		var last time.Time
		if err := poll.QueryRow(ctx, `SELECT max(finished_at) FROM runs WHERE starts_with(workflow_id, $1)`, prefix+"-a-").Scan(&last); err != nil {
			return fail(fmt.Errorf("read A's last end: %w", err))
		}
		run.ASeconds = last.Sub(began).Seconds()
		run.ARunsPerSecond = float64(runsA) / run.ASeconds
	}
	rows, err := poll.Query(ctx, `SELECT status, count(*) FROM runs WHERE NOT starts_with(workflow_id, $1) GROUP BY status`, prefix+"-w-")
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			rows.Close()
			return fail(err)
		}
		run.Outcomes[status] = n
	}
	rows.Close()
	if run.Admission, err = spendAdmission(ctx, poll, prefix+"-w-"); err != nil {
		return fail(err)
	}
	if err := procs.stop(); err != nil {
		return fail(err)
	}
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, "fairness: %s: B's first turn p50 %.0f ms, p95 %.0f ms; A %.1f runs/s; runs %v; %.1f s\n",
			label, run.BFirstTurn.P50, run.BFirstTurn.P95, run.ARunsPerSecond, run.Outcomes, run.Seconds)
		if p := run.BPhases; p != nil {
			fmt.Fprintf(cfg.Progress, "fairness: %s: B's phases p50/p95 ms: start %.0f/%.0f, workflow task queued %.0f/%.0f, workflow task %.0f/%.0f, activity queued %.0f/%.0f, activity to provider %.0f/%.0f\n",
				label, p.Start.P50, p.Start.P95, p.WorkflowQueued.P50, p.WorkflowQueued.P95, p.WorkflowTask.P50, p.WorkflowTask.P95,
				p.ActivityQueued.P50, p.ActivityQueued.P95, p.ToProvider.P50, p.ToProvider.P95)
		}
	}
	return run, nil
}

// fairnessGoal is run id's goal: the provider tells the runs apart by it.
func fairnessGoal(id string) string {
	return "Run " + id + ": answer that the words are counted."
}

// fairnessStart starts the runs charged to account, parallel at a time;
// with starts, it notes when each Start began.
func fairnessStart(ctx context.Context, c client.Client, ids []string, base agentsaga.RunSpec, account string, opts agentsaga.StartOptions,
	parallel int, starts []time.Time) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	next := make(chan int)
	for range min(parallel, len(ids)) {
		wg.Go(func() {
			for i := range next {
				spec := base
				spec.Goal, spec.Budget.Account = fairnessGoal(ids[i]), account
				if starts != nil {
					starts[i] = time.Now()
				}
				_, errs[i] = agentsaga.Start(ctx, c, ids[i], spec, opts)
			}
		})
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("start %s: %w", ids[i], err)
		}
	}
	return nil
}

// waitForRuns polls the ledger until the n runs whose IDs start with
// prefix are all recorded and at least ended of them have ended (neither
// queued nor running), and returns how many had ended.
func waitForRuns(ctx, runCtx context.Context, poll *pgx.Conn, prefix string, n, ended int) (int, error) {
	for {
		var recorded, done int
		if err := poll.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status NOT IN ($2, $3, $4)) FROM runs WHERE starts_with(workflow_id, $1)`,
			prefix, agentsagatype.RunQueued, agentsagatype.RunRunning, agentsagatype.RunAwaitingApproval).Scan(&recorded, &done); err != nil {
			return 0, fmt.Errorf("read the runs: %w", err)
		}
		if recorded >= n && done >= ended {
			return done, nil
		}
		select {
		case <-runCtx.Done():
			return done, fmt.Errorf("%d of %d runs %s* recorded, %d ended, at the timeout", recorded, n, prefix, done)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// PrintFairness writes the table and the targets.
func PrintFairness(out io.Writer, result FairnessResult) {
	cfg := result.Config
	fmt.Fprintf(out, "\nfairness: account %s starts %d runs; once %d have ended, account %s starts %d, on %d worker processes;\n",
		fairnessAccountA, cfg.RunsA, cfg.BAfter, fairnessAccountB, cfg.RunsB, cfg.Processes)
	fmt.Fprintf(out, "  a run is %d model turns, answered in %v-%v by a fake OpenAI-compatible provider, which notes each run's first request;\n",
		cfg.ToolCalls+1, cfg.LatencyMin, cfg.LatencyMax)
	fmt.Fprintf(out, "  each worker process runs at most %d activities at once (0: the SDK's default); %d warm-up runs a process before each measurement;\n",
		cfg.MaxActivities, fairnessWarmUp)
	fmt.Fprintf(out, "  %s: no admission limit, Temporal's task queues in order; %s: the same runs on a dev server started with %s;\n",
		FairnessFCFSContender, FairnessTemporalContender, strings.Join(FairnessServerArgs, " "))
	fmt.Fprintf(out, "  %s: max_concurrent_runs %d on the root account %s, so A's backlog waits in the engine's admission queue and its round robin admits B's runs\n",
		FairnessEngineContender, cfg.MaxConcurrentRuns, fairnessRoot)
	fmt.Fprintf(out, "  %s: that limit on the fairness server\n", FairnessBothContender)
	fmt.Fprintf(out, "  %s: the fairness server, the runs started with the ledger, so that a run of an account with few runs in flight weighs more (docs/budgets.md, fairness keys)\n",
		FairnessBurstContender)
	fmt.Fprintln(out, "  (every run carries its account as Temporal's fairness key; only the fairness server honours it)")
	tw := newTable(out, "\n  SERVER\tRUN\tB FIRST TURN P50\tB P95\tA RUNS/S\tA'S RUNS ENDED WHEN B STARTED\tOUTCOMES\tADMITTED\tSECONDS")
	for _, b := range result.Baselines {
		name := "B alone, idle fleet"
		if b.RunsB == 0 {
			name = "A alone"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t-\t%v\t%d\t%.1f\n", b.Server, name, fairnessMs(b.BFirstTurn.P50), fairnessMs(b.BFirstTurn.P95),
			fairnessRate(b.ARunsPerSecond), b.Outcomes, b.Admission.Admitted, b.Seconds)
	}
	for _, r := range result.Rows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%v\t%d\t%.1f\n", r.Server, r.Contender, fairnessMs(r.Run.BFirstTurn.P50), fairnessMs(r.Run.BFirstTurn.P95),
			fairnessRate(r.Run.ARunsPerSecond), r.Run.AEndedBeforeB, r.Run.Outcomes, r.Run.Admission.Admitted, r.Run.Seconds)
	}
	tw.Flush()
	for _, r := range result.Rows {
		bFast, aFast := FairnessVerdicts(r)
		fmt.Fprintf(out, "  TARGET %s: B's p95 %.0f ms = %.2fx its idle p95 (%.0f ms) <= 2x (%s); A %.1f runs/s = %.2f of A alone (%.1f) >= 0.9 (%s)\n",
			r.Contender, r.Run.BFirstTurn.P95, r.BSlowdown, r.BIdle.P95, verdict(bFast), r.Run.ARunsPerSecond, r.AShare, r.AAlone, verdict(aFast))
	}
	for _, r := range result.Rows {
		if a := r.Run.Admission; a.StillAdmitted > 0 || a.HeldUSD != 0 {
			fmt.Fprintf(out, "  %s: %d runs still admitted, $%.4f held at the end\n", r.Contender, a.StillAdmitted, a.HeldUSD)
		}
	}
	fmt.Fprintln(out, "\n  B FIRST TURN: from just before a B run's Start to its first request at the provider; A RUNS/S: A's runs over the time from its first Start")
	fmt.Fprintln(out, "    to its last run's end; ADMITTED: runs the admission queue admitted (the round robin's; a run under no limit is admitted at once)")
}

func fairnessMs(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + " ms"
}

func fairnessRate(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
