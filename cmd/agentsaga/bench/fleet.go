package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
)

// The two dev servers of the fleet scenario.
const (
	// FleetFileServer keeps its state in a SQLite file (--db-filename), as
	// `agentsaga dev` does: its own disk writes share the machine.
	FleetFileServer = "file"
	// FleetMemoryServer keeps its state in memory, so that the engine's
	// cost is not hidden behind the server's disk.
	FleetMemoryServer = "memory"
)

// FleetPlainQueue is the plain baseline's task queue; the agentsaga side
// uses `agentsaga worker`'s own, workflows.TaskQueue.
const FleetPlainQueue = "bench-fleet-plain"

// FleetWorkerReady is what `agentsaga bench fleet-worker` prints once its
// worker polls.
const FleetWorkerReady = "fleet-worker: polling"

// The contenders' names in the rows.
const (
	FleetPlainContender = "plain Temporal activities"
	// FleetPlainLoopContender is the plain side shaped as the agent run
	// is: a model turn (an activity that answers at once, as agentsaga's
	// scripted model does), the calls, a model turn. agentsaga's ratio to
	// it is the engine's own cost, without the run's shape.
	FleetPlainLoopContender = "plain Temporal agent loop"
	FleetAgentsagaContender = "agentsaga tool calls"
)

// FleetConfig sizes the fleet scenario: for each server and each process
// count, Runs runs of Calls tool calls each, on that many worker processes
// of each contender in turn.
type FleetConfig struct {
	Processes []int `json:"processes"`
	Runs      int   `json:"runs"`
	Calls     int   `json:"calls"`
	// PoolMaxConns is each agentsaga worker's Postgres pool (pool_max_conns
	// in its DATABASE_URL), so that the largest fleet stays well below
	// Postgres' max_connections on a server other work shares.
	PoolMaxConns int      `json:"pool_max_conns"`
	Servers      []string `json:"servers"`
	// Rounds repeats every measurement pair, plain then agentsaga, so that
	// a busy neighbour on the machine shows as spread, not as a figure.
	Rounds int `json:"rounds"`
	// DBOS adds the DBOS Transact contender (fleetdbos.go): the plain
	// agent loop as a DBOS workflow on a Postgres database of its own,
	// measured once per process count and round, with no Temporal server.
	DBOS bool `json:"dbos"`
	// Settle is how long the agentsaga workers idle before the statements
	// are first read: Postgres 15 flushes an idle backend's counters 10 s
	// after its last transaction, so the warm-up's must be in before the
	// window opens.
	Settle time.Duration `json:"settle"`

	// The Temporal CLI serves both dev servers; the scenario creates a
	// database of its own beside the one DatabaseURL names, so that every
	// transaction counted in it is the workers', and drops it; the
	// Executable runs `worker` and `bench fleet-worker`.
	ProcessScenario
}

// DefaultFleet fits the 2-core machine in about twelve minutes (the DBOS
// contender adds under a minute a process count: its windows are short). 200 runs
// make windows of 5-30 s; with 40, a window on the in-memory server ended
// in under a second and its ratio swung 0.34-1.67 between rounds.
var DefaultFleet = FleetConfig{Processes: []int{2, 4}, Runs: 200, Calls: 10, PoolMaxConns: 10,
	Servers: []string{FleetFileServer, FleetMemoryServer}, Rounds: 1, DBOS: true, Settle: 11 * time.Second}

// FleetRow is one contender on one server with one process count.
type FleetRow struct {
	Server    string `json:"server"`
	Contender string `json:"contender"`
	Processes int    `json:"processes"`
	Round     int    `json:"round"`
	Runs      int    `json:"runs"`
	// Calls is the tool calls made (runs x calls per run); Requests is what
	// the downstream received in the window, which equals it when no call
	// was retried.
	Calls    int `json:"calls"`
	Requests int `json:"downstream_requests"`
	// Keys is the distinct Idempotency-Keys the downstream saw in the
	// window: with Requests equal to Calls, every call was made once.
	Keys        int     `json:"downstream_keys"`
	Seconds     float64 `json:"seconds"`
	CallsPerSec float64 `json:"calls_per_second"`
	// Ratio is calls/s over the plain side's at the same server and
	// process count; LoopRatio, on agentsaga's rows, over the plain agent
	// loop's.
	Ratio     float64 `json:"ratio"`
	LoopRatio float64 `json:"ratio_to_plain_agent_loop,omitempty"`
	// Statements is what Postgres counted in the scenario's database over
	// the window; StatementsPerCall is the agentsaga side's, less the
	// plain side's count (its baseline, nothing uses Postgres there), over
	// the tool calls: a run's model turns and bookkeeping included.
	Statements        int64   `json:"postgres_statements"`
	StatementsPerCall float64 `json:"postgres_statements_per_call"`
	// BucketCommitsPerSec is the updates of the retry_buckets rows (one
	// row, the fleet bucket) over the window, per second.
	BucketCommitsPerSec float64 `json:"bucket_row_commits_per_second"`
	// ActivitiesPerCall is every activity the runs scheduled over their
	// tool calls; the latencies are of the tool calls alone, from their
	// histories: waiting in the task queue, then running.
	ActivitiesPerCall float64 `json:"activities_per_call"`
	// WorkflowTasksPerCall and EventsPerCall are the runs' completed
	// workflow tasks and history events over their tool calls: with the
	// activities, the work the Temporal server does for them.
	WorkflowTasksPerCall float64 `json:"workflow_tasks_per_call"`
	EventsPerCall        float64 `json:"history_events_per_call"`
	// Workers is how many of the processes ran tool calls in the window,
	// by the worker identity (PID@host) in the histories.
	Workers           int     `json:"workers_that_ran_calls"`
	ScheduleToStartMs float64 `json:"mean_schedule_to_start_ms"`
	StartToCloseMs    float64 `json:"mean_start_to_close_ms"`
	// FirstStepMs is the median time from a run's start (Temporal's
	// WorkflowExecutionStarted, DBOS's enqueue) to its first step's start;
	// StepGapP50Ms and StepGapP99Ms are the times from the end of a step
	// (the last of the tool calls, for the second model step) to the start
	// of each step that waited for it: what the engine puts between steps.
	FirstStepMs  float64 `json:"first_step_ms_p50"`
	StepGapP50Ms float64 `json:"step_gap_ms_p50"`
	StepGapP99Ms float64 `json:"step_gap_ms_p99"`
	// The CPU the window cost, per tool call, in milliseconds: the worker
	// processes, the dev server, and the Postgres backends serving the
	// scenario's database. On a machine of few cores, calls/s follows their
	// sum. Read from /proc; 0 where there is none.
	WorkerCPUMs   float64 `json:"worker_cpu_ms_per_call"`
	ServerCPUMs   float64 `json:"server_cpu_ms_per_call"`
	PostgresCPUMs float64 `json:"postgres_cpu_ms_per_call"`
	// CPURatio is the plain side's CPU per call over this row's: the ratio
	// calls/s would have on a machine where CPU is all that limits them,
	// steadier than the measured one when other work shares the machine.
	CPURatio float64 `json:"cpu_ratio"`
	// Deadlocks is what Postgres detected in the scenario's database in
	// the window (pg_stat_database.deadlocks).
	Deadlocks int64 `json:"postgres_deadlocks"`
	// Writes is the rows each table had written in the window, from
	// pg_stat_user_tables: where the statements went.
	Writes map[string]TableWrites `json:"table_writes,omitempty"`
	// LoadAverage is the machine's 1-minute load average as the window
	// opened: above its core count, other work was competing.
	LoadAverage float64 `json:"load_average_1m"`
}

func (r FleetRow) cpuMs() float64 { return r.WorkerCPUMs + r.ServerCPUMs + r.PostgresCPUMs }

// FleetResult is the scenario's figures and how its statements were counted.
type FleetResult struct {
	Config FleetConfig `json:"config"`
	// StatementSource names the Postgres view the statements come from.
	StatementSource string     `json:"statement_source"`
	Rows            []FleetRow `json:"rows"`
	// Ratios sums the rows up, one per server and process count.
	Ratios []FleetRatio `json:"ratios"`
}

func (cfg FleetConfig) validate() error {
	if cfg.Runs < 1 || cfg.Calls < 1 || cfg.PoolMaxConns < 1 || cfg.Rounds < 1 || len(cfg.Processes) == 0 || (len(cfg.Servers) == 0 && !cfg.DBOS) {
		return fmt.Errorf("bench: fleet: runs %d, calls %d, pool %d, rounds %d, processes %v and servers %v must be positive and not empty",
			cfg.Runs, cfg.Calls, cfg.PoolMaxConns, cfg.Rounds, cfg.Processes, cfg.Servers)
	}
	for _, n := range cfg.Processes {
		if n < 1 {
			return fmt.Errorf("bench: fleet: --processes %v: every count must be positive", cfg.Processes)
		}
	}
	for _, s := range cfg.Servers {
		if s != FleetFileServer && s != FleetMemoryServer {
			return fmt.Errorf("bench: fleet: server %q: want %q or %q", s, FleetFileServer, FleetMemoryServer)
		}
	}
	return nil
}

// Fleet compares agentsaga's tool calls with plain Temporal activities
// making the same HTTP call, each side on real worker processes of its
// own, on dev servers started for the scenario from cfg.TemporalBin.
func Fleet(ctx context.Context, cfg FleetConfig) (FleetResult, error) {
	return inScratchDir("bench: fleet", "fleet", cfg.validate(), FleetResult{Config: cfg}, func(dir string, result *FleetResult) error {
		db, err := newBenchDatabase(ctx, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		defer db.drop()
		result.StatementSource = db.source()
		down, err := StartDownstream(Faults{}, 1)
		if err != nil {
			return err
		}
		defer down.Close()
		for _, kind := range cfg.Servers {
			rows, err := fleetOnServer(ctx, cfg, kind, dir, db, down)
			if err != nil {
				return err
			}
			result.Rows = append(result.Rows, rows...)
		}
		if cfg.DBOS {
			rows, err := fleetDBOSRows(ctx, cfg, dir, down, result.Rows)
			if err != nil {
				return err
			}
			result.Rows = append(result.Rows, rows...)
		}
		result.Ratios = fleetRatios(result.Rows)
		return nil
	})
}

// FleetRatio is agentsaga's ratio at one server and process count over the
// rounds: each round's agentsaga calls/s over the plain side's measured
// just before it.
type FleetRatio struct {
	Server    string  `json:"server"`
	Processes int     `json:"processes"`
	Median    float64 `json:"median"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
	// CPUMedian is the median of the rows' CPU ratios.
	CPUMedian float64 `json:"cpu_median"`
	// LoopMedian is the median of agentsaga's ratios to the plain agent
	// loop.
	LoopMedian float64 `json:"loop_median"`
}

func fleetRatios(rows []FleetRow) []FleetRatio {
	type key struct {
		server    string
		processes int
	}
	var order []key
	ratios, cpu, loop := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	for _, r := range rows {
		if r.Contender != FleetAgentsagaContender {
			continue
		}
		k := key{r.Server, r.Processes}
		if ratios[k] == nil {
			order = append(order, k)
		}
		ratios[k] = append(ratios[k], r.Ratio)
		cpu[k] = append(cpu[k], r.CPURatio)
		loop[k] = append(loop[k], r.LoopRatio)
	}
	var out []FleetRatio
	for _, k := range order {
		rs := ratios[k]
		out = append(out, FleetRatio{Server: k.server, Processes: k.processes, Median: median(rs), Min: slices.Min(rs), Max: slices.Max(rs),
			CPUMedian: median(cpu[k]), LoopMedian: median(loop[k])})
	}
	return out
}

// fleetSide is one contender: its worker processes and how it starts a run.
type fleetSide struct {
	contender string
	args, env []string
	// ready is what a process writes once its worker polls.
	ready string
	// usesPostgres makes the measurement wait for the workers' Postgres
	// counters to settle before its window opens.
	usesPostgres bool
	// db, when set, is the database the side's processes use, in place of
	// the scenario's: its counters and its backends' CPU are the row's.
	db *benchDatabase
	// release, when set, closes the bench's own idle connections to the
	// side's database before each reading of its counters: a backend
	// flushes them as it exits, and an idle one only 10 s later.
	release func()
	// timings reads the measured runs' step times back.
	timings func(ctx context.Context, ids []string) (latencies, error)
	// start starts one run of the configured calls; wait waits for its end.
	start func(ctx context.Context, id string) (wait func(context.Context) error, err error)
}

func fleetOnServer(ctx context.Context, cfg FleetConfig, kind, dir string, db *benchDatabase, down *Downstream) ([]FleetRow, error) {
	opts := serverOptions{name: kind}
	if kind == FleetFileServer {
		opts.dbFile = filepath.Join(dir, "temporal.db")
	}
	server, err := startBenchServer(ctx, cfg.TemporalBin, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("bench: fleet: %w", err)
	}
	defer server.stop()
	c := server.c

	spec, err := fleetSpec(down.URL(), cfg.Calls)
	if err != nil {
		return nil, err
	}
	retry := spec.Retry.WithDefaults()
	plainInput := FleetPlainInput{URL: down.URL(), Calls: cfg.Calls, StartToClose: spec.Tools[0].Timeout(),
		InitialInterval: retry.Backoff().Base, MaximumInterval: retry.Backoff().Cap, MaximumAttempts: int32(retry.MaxAttempts)}
	histories := func(toolActivity, modelActivity string) func(context.Context, []string) (latencies, error) {
		return func(ctx context.Context, ids []string) (latencies, error) {
			return toolLatencies(ctx, c, ids, toolActivity, modelActivity)
		}
	}
	plainSide := func(contender string, in FleetPlainInput) fleetSide {
		return fleetSide{contender: contender, ready: FleetWorkerReady,
			args: []string{"bench", "fleet-worker", "--task-queue", FleetPlainQueue}, env: server.env, timings: histories("BaselineCall", "BaselineModelTurn"),
			start: func(ctx context.Context, id string) (func(context.Context) error, error) {
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: FleetPlainQueue}, FleetPlainWorkflow, in)
				if err != nil {
					return nil, fmt.Errorf("bench: fleet: start %s: %w", id, err)
				}
				return func(ctx context.Context) error { return run.Get(ctx, nil) }, nil
			}}
	}
	plain := plainSide(FleetPlainContender, plainInput)
	loopInput := plainInput
	loopInput.ModelTurns = true
	loop := plainSide(FleetPlainLoopContender, loopInput)
	saga := fleetSide{contender: FleetAgentsagaContender, ready: "agentsaga worker running",
		// The cleaner stays off: it would prune in the window.
		args: []string{"worker", "--retention", "-1s"}, env: server.workerEnv("DATABASE_URL=" + db.workerURL(cfg.PoolMaxConns)),
		usesPostgres: true, timings: histories("agentsaga.CallTool", "agentsaga.CallModel"), start: startAgentsagaRun(c, spec)}

	var rows []FleetRow
	for round := range cfg.Rounds {
		for _, n := range cfg.Processes {
			m := fleetMeasurement{cfg: cfg, serverPort: server.port, c: c, db: db, down: down, dir: dir, server: kind, processes: n}
			base, err := m.measure(ctx, plain)
			if err != nil {
				return nil, err
			}
			shaped, err := m.measure(ctx, loop)
			if err != nil {
				return nil, err
			}
			row, err := m.measure(ctx, saga)
			if err != nil {
				return nil, err
			}
			for _, r := range []*FleetRow{&base, &shaped, &row} {
				r.Round, r.Ratio = round+1, r.CallsPerSec/base.CallsPerSec
				if r.cpuMs() > 0 {
					r.CPURatio = base.cpuMs() / r.cpuMs()
				}
			}
			row.LoopRatio = row.CallsPerSec / shaped.CallsPerSec
			row.StatementsPerCall = float64(row.Statements-base.Statements) / float64(row.Calls)
			base.StatementsPerCall = float64(base.Statements) / float64(base.Calls)
			shaped.StatementsPerCall = float64(shaped.Statements) / float64(shaped.Calls)
			rows = append(rows, base, shaped, row)
		}
	}
	return rows, nil
}

// startAgentsagaRun is a fleetSide's start for agentsaga runs of spec: its
// wait fails unless the run completed.
func startAgentsagaRun(c client.Client, spec agentsaga.RunSpec) func(context.Context, string) (func(context.Context) error, error) {
	return func(ctx context.Context, id string) (func(context.Context) error, error) {
		// Every ID carries a fresh nonce, in a database the bench made
		// for itself; a ledger round trip per start would sit in the
		// measured path.
		run, err := agentsaga.Start(ctx, c, id, spec, agentsaga.StartOptions{SkipLedgerCheck: true})
		if err != nil {
			return nil, fmt.Errorf("bench: fleet: start %s: %w", id, err)
		}
		return func(ctx context.Context) error {
			result, err := run.Result(ctx)
			if err != nil {
				return fmt.Errorf("bench: fleet: run %s: %w", id, err)
			}
			if result.Status != agentsagatype.RunCompleted {
				return fmt.Errorf("bench: fleet: run %s ended %s, not completed: %s", id, result.Status, result.Reason)
			}
			return nil
		}, nil
	}
}

// fleetDBOSRows measures the DBOS contender at each process count in each
// round, with the timeout and retry policy the other contenders' tool calls
// have, and its calls/s over the plain agent loop's measured on the
// in-memory server (or the first server) in the same round.
func fleetDBOSRows(ctx context.Context, cfg FleetConfig, dir string, down *Downstream, others []FleetRow) ([]FleetRow, error) {
	d, err := newFleetDBOSLoop(ctx, cfg.DatabaseURL, down, cfg.Calls)
	if err != nil {
		return nil, err
	}
	defer d.close()
	side := d.side()
	var rows []FleetRow
	for round := range cfg.Rounds {
		for _, n := range cfg.Processes {
			m := fleetMeasurement{cfg: cfg, db: d.db, down: down, dir: dir, server: FleetDBOSServer, processes: n}
			row, err := m.measure(ctx, side)
			if err != nil {
				return nil, err
			}
			row.Round = round + 1
			row.StatementsPerCall = float64(row.Statements) / float64(row.Calls)
			var loop *FleetRow
			for i, o := range others {
				if o.Contender == FleetPlainLoopContender && o.Round == row.Round && o.Processes == n && (loop == nil || o.Server == FleetMemoryServer) {
					loop = &others[i]
				}
			}
			if loop != nil {
				row.LoopRatio = row.CallsPerSec / loop.CallsPerSec
				if row.cpuMs() > 0 {
					row.CPURatio = loop.cpuMs() / row.cpuMs()
				}
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// fleetSpec is a run whose scripted model (no network) asks for calls
// HTTP tool calls in one turn, then answers.
func fleetSpec(url string, calls int) (agentsaga.RunSpec, error) {
	var list []string
	for i := range calls {
		list = append(list, fmt.Sprintf("{name: down, arguments: {n: %d}}", i))
	}
	return parseRunSpec("bench: fleet", fmt.Sprintf(`
goal: call the downstream service
budget: {steps: 4, seconds: 600}
model:
  provider: scripted
  script:
    - tool_calls: [%s]
    - content: done
tools:
  - {name: down, kind: http, url: %q}
`, strings.Join(list, ", "), url))
}

type fleetMeasurement struct {
	cfg FleetConfig
	// serverPort finds the dev server's process.
	serverPort string
	c          client.Client
	db         *benchDatabase
	down       *Downstream
	dir        string
	server     string
	processes  int
}

// measure runs one side: its processes start and poll, a warm-up round of
// the same size opens their connections and prepares their statements
// (pgx prepares a statement once per connection, and Postgres counts that
// as a transaction of its own), then the measured round, then the
// processes stop (which flushes their Postgres counters) and the counters
// are read.
func (m fleetMeasurement) measure(ctx context.Context, side fleetSide) (FleetRow, error) {
	row := FleetRow{Server: m.server, Contender: side.contender, Processes: m.processes, Runs: m.cfg.Runs, Calls: m.cfg.Runs * m.cfg.Calls}
	if side.db != nil {
		m.db = side.db
	}
	label := fmt.Sprintf("%s server, %d processes, %s", m.server, m.processes, side.contender)
	prefix := fmt.Sprintf("fleet-%s-%s-%d-%s", m.server, strings.Fields(side.contender)[0], m.processes, nonce())
	procs, err := startWorkerProcesses(ctx, m.cfg.Executable, side.args, side.env, filepath.Join(m.dir, prefix), m.processes, side.ready)
	defer func() { _ = procs.stop() }()
	if err != nil {
		return row, fmt.Errorf("bench: fleet: %s: %w", label, err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if _, _, err := runFleet(runCtx, prefix+"-warm", m.cfg.Runs, side.start); err != nil {
		return row, fmt.Errorf("bench: fleet: %s: warm-up: %w%s", label, err, logs(procs))
	}
	if side.usesPostgres {
		select {
		case <-ctx.Done():
			return row, ctx.Err()
		case <-time.After(m.cfg.Settle):
		}
	}
	if side.release != nil {
		side.release()
		// As waitForNoClients does: the backends leave, then flush.
		time.Sleep(200 * time.Millisecond)
	}
	before, err := m.db.read(ctx)
	if err != nil {
		return row, err
	}
	counts := m.down.Counts()
	cpuBefore := sampleCPU(procs, m.serverPort, m.db.name)
	row.LoadAverage = loadAverage()
	elapsed, ids, err := runFleet(runCtx, prefix, m.cfg.Runs, side.start)
	if err != nil {
		return row, fmt.Errorf("bench: fleet: %s: %w%s", label, err, logs(procs))
	}
	cpu := sampleCPU(procs, m.serverPort, m.db.name).since(cpuBefore)
	now := m.down.Counts()
	row.Requests, row.Keys = now.Requests-counts.Requests, now.Keys-counts.Keys
	row.WorkerCPUMs, row.ServerCPUMs, row.PostgresCPUMs = 1000*cpu.workers/float64(row.Calls), 1000*cpu.server/float64(row.Calls), 1000*cpu.postgres/float64(row.Calls)
	for _, p := range procs {
		if err := p.stop(); err != nil {
			return row, fmt.Errorf("bench: fleet: %s: %w", label, err)
		}
	}
	if side.release != nil {
		side.release()
	}
	if err := m.db.waitForNoClients(ctx); err != nil {
		return row, err
	}
	after, err := m.db.read(ctx)
	if err != nil {
		return row, err
	}
	row.Seconds = elapsed.Seconds()
	row.CallsPerSec = float64(row.Calls) / row.Seconds
	row.Statements = after.statements - before.statements
	row.BucketCommitsPerSec = float64(after.bucketUpdates-before.bucketUpdates) / row.Seconds
	row.Deadlocks = after.deadlocks - before.deadlocks
	for table, w := range after.writes {
		was := before.writes[table]
		if w != was {
			if row.Writes == nil {
				row.Writes = map[string]TableWrites{}
			}
			row.Writes[table] = TableWrites{w.Inserted - was.Inserted, w.Updated - was.Updated, w.Deleted - was.Deleted}
		}
	}
	lat, err := side.timings(ctx, ids)
	if err != nil {
		return row, err
	}
	row.FirstStepMs, row.StepGapP50Ms, row.StepGapP99Ms = lat.steps()
	row.ActivitiesPerCall = float64(lat.activities) / float64(row.Calls)
	row.WorkflowTasksPerCall = float64(lat.workflowTasks) / float64(row.Calls)
	row.EventsPerCall = float64(lat.events) / float64(row.Calls)
	row.Workers = len(lat.workers)
	if lat.calls > 0 {
		row.ScheduleToStartMs = float64(lat.queued.Milliseconds()) / float64(lat.calls)
		row.StartToCloseMs = float64(lat.running.Milliseconds()) / float64(lat.calls)
	}
	if m.cfg.Progress != nil {
		fmt.Fprintf(m.cfg.Progress, "fleet: %s: %d calls in %.1f s, %.0f calls/s\n", label, row.Calls, row.Seconds, row.CallsPerSec)
	}
	return row, nil
}

// runFleet starts runs runs and waits for all of them; the time is from
// the first start to the last completion.
func runFleet(ctx context.Context, prefix string, runs int,
	start func(context.Context, string) (func(context.Context) error, error)) (time.Duration, []string, error) {
	began := time.Now()
	ids := runIDs(prefix, runs)
	waits := make([]func(context.Context) error, runs)
	for i := range runs {
		wait, err := start(ctx, ids[i])
		if err != nil {
			return 0, nil, err
		}
		waits[i] = wait
	}
	errs := make([]error, runs)
	var wg sync.WaitGroup
	for i, wait := range waits {
		wg.Go(func() { errs[i] = wait(ctx) })
	}
	wg.Wait()
	return time.Since(began), ids, errors.Join(errs...)
}

// FleetPlainInput is one run of FleetPlainWorkflow: the HTTP call and the
// timeout and retry policy agentsaga's AgentRun gives a tool call.
type FleetPlainInput struct {
	URL             string        `json:"url"`
	Calls           int           `json:"calls"`
	StartToClose    time.Duration `json:"start_to_close"`
	InitialInterval time.Duration `json:"initial_interval"`
	MaximumInterval time.Duration `json:"maximum_interval"`
	MaximumAttempts int32         `json:"maximum_attempts"`
	// ModelTurns makes the run an agent loop's shape: a model turn
	// (BaselineModelTurn), the calls, a model turn.
	ModelTurns bool `json:"model_turns,omitempty"`
}

// FleetPlainWorkflow is the plain side of the fleet scenario: what a team
// without agentsaga would write for one turn of Calls tool calls. The
// calls start together, as the agentsaga run's one turn starts them, and
// the run fails if one does.
func FleetPlainWorkflow(ctx workflow.Context, in FleetPlainInput) error {
	turn := func(n int) error {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{ActivityID: fmt.Sprintf("model-%d", n),
			StartToCloseTimeout: 2 * time.Minute, RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: in.MaximumAttempts}})
		return workflow.ExecuteActivity(actx, BaselineModelTurn, in.Calls).Get(ctx, nil)
	}
	if in.ModelTurns {
		if err := turn(1); err != nil {
			return err
		}
	}
	futures := make([]workflow.Future, in.Calls)
	for i := range in.Calls {
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			ActivityID:          fmt.Sprintf("call-%d", i+1),
			StartToCloseTimeout: in.StartToClose,
			RetryPolicy: &temporal.RetryPolicy{InitialInterval: in.InitialInterval, BackoffCoefficient: 2,
				MaximumInterval: in.MaximumInterval, MaximumAttempts: in.MaximumAttempts},
		})
		futures[i] = workflow.ExecuteActivity(actx, BaselineCall, BaselineInput{URL: in.URL})
	}
	var errs []error
	for _, f := range futures {
		errs = append(errs, f.Get(ctx, nil))
	}
	if err := errors.Join(errs...); err != nil || !in.ModelTurns {
		return err
	}
	return turn(2)
}

// BaselineModelTurn is the plain agent loop's model turn: like agentsaga's
// scripted model, it answers at once, naming the calls to make.
func BaselineModelTurn(_ context.Context, calls int) ([]string, error) {
	names := make([]string, calls)
	for i := range names {
		names[i] = fmt.Sprintf("call-%d", i+1)
	}
	return names, nil
}

// RunFleetPlainWorker is one process of the plain side (`agentsaga bench
// fleet-worker`): a worker with the SDK's default options, as `agentsaga
// worker` has, and no interceptor or ledger, until ctx ends.
func RunFleetPlainWorker(ctx context.Context, out io.Writer, c client.Client, queue string) error {
	w := sdkworker.New(c, queue, sdkworker.Options{})
	w.RegisterWorkflow(FleetPlainWorkflow)
	w.RegisterActivity(BaselineCall)
	w.RegisterActivity(BaselineModelTurn)
	if err := w.Start(); err != nil {
		return fmt.Errorf("bench: fleet-worker: start on task queue %q: %w", queue, err)
	}
	fmt.Fprintf(out, "%s task queue %q\n", FleetWorkerReady, queue)
	<-ctx.Done()
	w.Stop()
	return nil
}

// latencies are the tool calls' times and the runs' step timelines.
type latencies struct {
	activities, calls, events, workflowTasks int
	queued, running                          time.Duration
	workers                                  map[string]bool
	// first is each run's time to its first step; gaps, each waiting
	// step's time from the end of what it waited for.
	first, gaps []time.Duration
}

// stepSpan is one step of a run: a model turn or a tool call.
type stepSpan struct {
	model      bool
	start, end time.Time
}

// runTimeline is a run's start and its steps.
type runTimeline struct {
	began time.Time
	steps []stepSpan
}

// add takes a run's time to its first step and its gaps. The steps fall in
// phases by kind, in order of start (model, calls, model): a step of one
// phase waited for the last step of the phase before it to end.
func (l *latencies) add(run runTimeline) {
	if len(run.steps) == 0 {
		return
	}
	steps := slices.SortedFunc(slices.Values(run.steps), func(a, b stepSpan) int { return a.start.Compare(b.start) })
	l.first = append(l.first, steps[0].start.Sub(run.began))
	var previousEnd, phaseEnd time.Time
	for i, s := range steps {
		if i > 0 && s.model != steps[i-1].model {
			previousEnd, phaseEnd = phaseEnd, time.Time{}
		}
		if !previousEnd.IsZero() {
			l.gaps = append(l.gaps, s.start.Sub(previousEnd))
		}
		if s.end.After(phaseEnd) {
			phaseEnd = s.end
		}
	}
}

// steps is the median time to the first step and the gaps' p50 and p99, in
// milliseconds.
func (l latencies) steps() (firstP50, gapP50, gapP99 float64) {
	ms := func(ds []time.Duration, q float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		ds = slices.Sorted(slices.Values(ds))
		return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000
	}
	return ms(l.first, 0.5), ms(l.gaps, 0.5), ms(l.gaps, 0.99)
}

// toolLatencies reads the runs' histories: the tool calls' times, and the
// timelines of their tool calls and model turns (the activities named
// toolActivity and modelActivity).
func toolLatencies(ctx context.Context, c client.Client, ids []string, toolActivity, modelActivity string) (latencies, error) {
	l := latencies{workers: map[string]bool{}}
	for _, id := range ids {
		var run runTimeline
		scheduled := map[int64]time.Time{}
		model := map[int64]bool{}
		started := map[int64]time.Time{}
		identity := map[int64]string{}
		iter := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			event, err := iter.Next()
			if err != nil {
				return l, fmt.Errorf("bench: fleet: history of %s: %w", id, err)
			}
			at := event.GetEventTime().AsTime()
			l.events++
			switch {
			case event.GetWorkflowExecutionStartedEventAttributes() != nil:
				run.began = at
			case event.GetWorkflowTaskCompletedEventAttributes() != nil:
				l.workflowTasks++
			case event.GetActivityTaskScheduledEventAttributes() != nil:
				l.activities++
				switch event.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() {
				case toolActivity:
					scheduled[event.GetEventId()] = at
				case modelActivity:
					model[event.GetEventId()] = true
				}
			case event.GetActivityTaskStartedEventAttributes() != nil:
				attrs := event.GetActivityTaskStartedEventAttributes()
				started[attrs.GetScheduledEventId()], identity[attrs.GetScheduledEventId()] = at, attrs.GetIdentity()
			case event.GetActivityTaskCompletedEventAttributes() != nil:
				id := event.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
				if s, ok := scheduled[id]; ok {
					l.calls++
					l.workers[identity[id]] = true
					l.queued += started[id].Sub(s)
					l.running += at.Sub(started[id])
					run.steps = append(run.steps, stepSpan{start: started[id], end: at})
				} else if model[id] {
					run.steps = append(run.steps, stepSpan{model: true, start: started[id], end: at})
				}
			}
		}
		l.add(run)
	}
	return l, nil
}

// printFleetDBOS writes the DBOS contender's table: no Temporal server, and
// its ratios are to the plain agent loop's row of the same round.
func printFleetDBOS(out io.Writer, rows []FleetRow) {
	fmt.Fprintf(out, "\nDBOS Transact v1.9.0 on Postgres alone (no Temporal server): the plain agent loop as a workflow of steps (dbos.RunAsStep, the calls by dbos.Go),\n")
	fmt.Fprintf(out, "  enqueued by a DBOS client on one queue polled every %s by each executor process; its own database beside the scenario's\n", FleetDBOSPollInterval)
	tw := newTable(out, "  ROUND\tCONTENDER\tPROCESSES\tCALLS\tSECONDS\tCALLS/S\tTO LOOP\tSTATEMENTS/CALL\tSTEPS/CALL\tRUNNING\tFIRST STEP\tGAP P50\tGAP P99\tCPU MS/CALL\tCPU VS LOOP\tEXECUTORS\tLOAD")
	for _, r := range rows {
		if r.Contender != FleetDBOSContender {
			continue
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.1f+%.1f+%.1f\t%.2f\t%d\t%.1f\n",
			r.Round, r.Contender, r.Processes, r.Calls, r.Seconds, r.CallsPerSec, r.LoopRatio, r.StatementsPerCall, r.ActivitiesPerCall,
			r.StartToCloseMs, r.FirstStepMs, r.StepGapP50Ms, r.StepGapP99Ms, r.WorkerCPUMs, r.ServerCPUMs, r.PostgresCPUMs, r.CPURatio, r.Workers, r.LoadAverage)
	}
	tw.Flush()
	fmt.Fprintln(out, "  TO LOOP is calls/s over the plain Temporal agent loop's (in-memory dev server) in the same round; CPU VS LOOP its CPU per call over this row's;")
	fmt.Fprintln(out, "  DBOS records step times in milliseconds, so its gaps are rounded to them")
}

// PrintFleet writes one table per server.
func PrintFleet(out io.Writer, result FleetResult) {
	cfg := result.Config
	fmt.Fprintf(out, "\nfleet: %d runs x %d tool calls to a healthy downstream, on 1 task queue per side, worker processes with the SDK's default options\n",
		cfg.Runs, cfg.Calls)
	fmt.Fprintf(out, "  agentsaga: each run is an AgentRun whose scripted model (no network) asks for its %d calls in one turn, then answers;\n", cfg.Calls)
	fmt.Fprintln(out, "    its model turns and bookkeeping activities count in its time, not as calls; each worker is `agentsaga worker`")
	fmt.Fprintf(out, "    with a pool of %d Postgres connections\n", cfg.PoolMaxConns)
	fmt.Fprintf(out, "  plain: each run starts its %d HTTP activities at once, with the same timeout and retry policy, no interceptor, no ledger\n", cfg.Calls)
	fmt.Fprintln(out, "  plain agent loop: the same, between two model-turn activities that answer at once, as the agentsaga run's shape")
	fmt.Fprintf(out, "  calls/s: tool calls over the time from the first start to the last completion; statements: %s\n", result.StatementSource)
	for _, server := range cfg.Servers {
		title := "dev server in memory (no --db-filename)"
		if server == FleetFileServer {
			title = "dev server with --db-filename"
		}
		fmt.Fprintf(out, "\n%s\n", title)
		tw := newTable(out, "  ROUND\tCONTENDER\tPROCESSES\tCALLS\tSECONDS\tCALLS/S\tRATIO\tTARGET\tSTATEMENTS/CALL\tBUCKET COMMITS/S\tACTIVITIES/CALL\tEVENTS/CALL\tQUEUED\tRUNNING\tFIRST STEP\tGAP P50\tGAP P99\tCPU MS/CALL\tDEADLOCKS\tLOAD")
		for _, r := range result.Rows {
			if r.Server != server {
				continue
			}
			target := "-"
			if r.Contender == FleetAgentsagaContender {
				verdict := "met"
				if r.Ratio < 0.9 {
					verdict = "MISSED"
				}
				target = ">= 0.90 (" + verdict + ")"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%.1f\t%.1f\t%.2f\t%s\t%.2f\t%.1f\t%.2f\t%.1f\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.0f ms\t%.1f+%.1f+%.1f\t%d\t%.1f\n",
				r.Round, r.Contender, r.Processes, r.Calls, r.Seconds, r.CallsPerSec, r.Ratio, target, r.StatementsPerCall, r.BucketCommitsPerSec,
				r.ActivitiesPerCall, r.EventsPerCall, r.ScheduleToStartMs, r.StartToCloseMs, r.FirstStepMs, r.StepGapP50Ms, r.StepGapP99Ms,
				r.WorkerCPUMs, r.ServerCPUMs, r.PostgresCPUMs, r.Deadlocks, r.LoadAverage)
		}
		tw.Flush()
		for _, r := range result.Ratios {
			if r.Server == server {
				fmt.Fprintf(out, "  %d processes: ratio %.2f (median of %d rounds; %.2f-%.2f); target >= 0.90; by CPU per call %.2f; to the plain agent loop %.2f\n",
					r.Processes, r.Median, cfg.Rounds, r.Min, r.Max, r.CPUMedian, r.LoopMedian)
			}
		}
	}
	if cfg.DBOS {
		printFleetDBOS(out, result.Rows)
	}
	fmt.Fprintln(out, "\n  QUEUED and RUNNING are a tool call's mean time from scheduled to started and from started to completed, from the runs' histories;")
	fmt.Fprintln(out, "  FIRST STEP is the median time from a run's start (WorkflowExecutionStarted; DBOS: enqueued) to its first step's start; GAP P50 and P99")
	fmt.Fprintln(out, "    are from the end of a step (the last tool call, before the second model turn) to the start of each step that waited for it;")
	fmt.Fprintln(out, "  CPU MS/CALL is the window's CPU per tool call: worker processes + dev server + Postgres backends of the scenario's database;")
	fmt.Fprintf(out, "  LOAD is the machine's 1-minute load average as the window opened (%d cores)\n", runtime.NumCPU())
}
