package bench

// The harness is the one runner the benchmarks share. For the scenarios
// that start their own processes (fleet, ratelimit, spend, fairness,
// takeover): their configs' common parts (ProcessScenario, contest,
// providerLatency), the prologue that validates a config and makes the
// scratch directory (inScratchDir), a dev server in memory or on a file
// (startBenchServer), a Postgres database of the scenario's own
// (benchDatabase), worker processes of the agentsaga binary started and
// waited for (startWorkerProcesses), and CPU, memory and load sampling.
// For the scenarios whose workers run in the test's or the command's
// process: the agentsaga worker (startEngineWorker). For all: the fakes'
// loopback HTTP server (loopback), run specs (parseRunSpec), tables and
// their targets and verdicts (newTable, printTargets, targetCell), and
// percentiles. The charts' common parts are in charts.go; the fakes
// themselves, and each benchmark's own measurement, in files of their own.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"maps"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/procfs"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/migrations"
	"github.com/agentsaga/agentsaga/worker"
	"github.com/agentsaga/agentsaga/workflows"
)

// ProcessScenario is what a scenario that starts its own dev server and
// worker processes is given: the Temporal CLI, the agentsaga binary the
// workers run, the Postgres server its databases are made on, and where
// it reports progress.
type ProcessScenario struct {
	TemporalBin string    `json:"-"`
	DatabaseURL string    `json:"-"`
	Executable  string    `json:"-"`
	Progress    io.Writer `json:"-"`
}

// contest is how a process scenario runs its contenders: by their short
// names, in this order; each worker process with a Postgres pool of
// PoolMaxConns connections (pool_max_conns in its DATABASE_URL); and one
// measurement's runs within Timeout (what becomes of a run still going
// then is the scenario's to say).
type contest struct {
	Contenders   []string      `json:"contenders"`
	PoolMaxConns int           `json:"pool_max_conns"`
	Timeout      time.Duration `json:"timeout"`
}

// validate checks that there are contenders, each a key of names (short
// name to row name), and that every process count is positive.
func (c contest) validate(label string, names map[string]string, processes ...int) error {
	return checkContenders(label, c.Contenders, names, processes...)
}

// checkContenders is contest.validate for contenders of a config's own.
func checkContenders(label string, contenders []string, names map[string]string, processes ...int) error {
	for _, n := range processes {
		if n < 1 {
			return fmt.Errorf("%s: --processes %v: every count must be positive", label, processes)
		}
	}
	if len(contenders) == 0 {
		return fmt.Errorf("%s: no contenders", label)
	}
	for _, name := range contenders {
		if _, ok := names[name]; !ok {
			return fmt.Errorf("%s: unknown contender %q (want one of %s)", label, name, strings.Join(slices.Sorted(maps.Keys(names)), ", "))
		}
	}
	return nil
}

// providerLatency is how long a fake provider takes to answer a request:
// drawn uniformly from LatencyMin..LatencyMax.
type providerLatency struct {
	LatencyMin time.Duration `json:"latency_min"`
	LatencyMax time.Duration `json:"latency_max"`
}

// ordered is whether the range is one: not negative, its ends in order.
func (l providerLatency) ordered() bool { return l.LatencyMin >= 0 && l.LatencyMax >= l.LatencyMin }

// draw is one answer's latency.
func (l providerLatency) draw(random *mathrand.Rand) time.Duration {
	latency := l.LatencyMin
	if spread := l.LatencyMax - l.LatencyMin; spread > 0 {
		latency += time.Duration(random.Int64N(int64(spread) + 1))
	}
	return latency
}

// inScratchDir runs a process scenario: unless its config is invalid, it
// makes the scenario's scratch directory (for its servers' and workers'
// logs), runs run there with the result to fill, and removes it after.
func inScratchDir[R any](label, name string, invalid error, result R, run func(dir string, result *R) error) (R, error) {
	if invalid != nil {
		return result, invalid
	}
	dir, err := os.MkdirTemp("", "agentsaga-"+name+"-")
	if err != nil {
		return result, fmt.Errorf("%s: temp dir: %w", label, err)
	}
	defer os.RemoveAll(dir)
	err = run(dir, &result)
	return result, err
}

// serverOptions shape a benchServer: it logs to dir/temporal.log (or
// dir/temporal-name.log), keeps its state in memory (or in dbFile) and
// is started with extraArgs (e.g. dynamic config values).
type serverOptions struct {
	name, dbFile string
	extraArgs    []string
}

// benchServer is a dev server that a scenario started for itself, and the
// environment its worker processes connect with.
type benchServer struct {
	server *testsuite.DevServer
	c      client.Client
	env    []string
	// port finds the server's process (sampleCPU).
	port string
}

// startBenchServer starts a dev server from temporalBin with the engine's
// search attributes.
func startBenchServer(ctx context.Context, temporalBin, dir string, opts serverOptions) (*benchServer, error) {
	logPath := filepath.Join(dir, "temporal.log")
	if opts.name != "" {
		logPath = filepath.Join(dir, "temporal-"+opts.name+".log")
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the server's process holds its own descriptor
	server, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{ExistingPath: temporalBin, LogLevel: "error", Stdout: logFile, Stderr: logFile,
		SearchAttributes: workflows.SearchAttributes(), ExtraArgs: opts.extraArgs, DBFilename: opts.dbFile,
		ClientOptions: &client.Options{Namespace: "default",
			Logger: log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}})
	if err != nil {
		return nil, fmt.Errorf("start the %s dev server from %s %v: %w (log: %s)", cmpNonEmpty(opts.name, "memory"), temporalBin, opts.extraArgs, err, tail(logPath))
	}
	_, port, _ := strings.Cut(server.FrontendHostPort(), ":")
	return &benchServer{server: server, c: server.Client(), port: port,
		env: []string{"TEMPORAL_ADDRESS=" + server.FrontendHostPort(), "TEMPORAL_NAMESPACE=default",
			// Nothing but the workers themselves: no metrics server, no
			// trace export, no deployment.
			"AGENTSAGA_METRICS_ADDR=", "OTEL_EXPORTER_OTLP_ENDPOINT=", "AGENTSAGA_DEPLOYMENT=", "AGENTSAGA_BUILD_ID="}}, nil
}

func (s *benchServer) stop() { _ = s.server.Stop() }

// workerEnv is the environment of a worker process on the server, with
// extra (e.g. DATABASE_URL=...).
func (s *benchServer) workerEnv(extra ...string) []string {
	return append(slices.Clip(s.env), extra...)
}

// workerProcesses are the worker processes of one measurement.
type workerProcesses []*benchProcess

// startWorkerProcesses starts n processes of executable with args and env
// (each logging to logPrefix-i.log) and waits until each has written ready
// to its log. It returns those it started, also on an error.
func startWorkerProcesses(ctx context.Context, executable string, args, env []string, logPrefix string, n int, ready string) (workerProcesses, error) {
	procs := make(workerProcesses, 0, n)
	for i := range n {
		p, err := startProcess(executable, args, env, fmt.Sprintf("%s-%d.log", logPrefix, i))
		if err != nil {
			return procs, err
		}
		procs = append(procs, p)
	}
	return procs, waitForReady(ctx, procs, ready)
}

// stop stops every process (once: a second stop does nothing), and
// returns the first one's error.
func (ws *workerProcesses) stop() error {
	var first error
	for _, p := range *ws {
		if err := p.stop(); err != nil && first == nil {
			first = err
		}
	}
	*ws = nil
	return first
}

// benchProcess is one worker process, its output in a log file so that a
// full pipe never blocks it.
type benchProcess struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProcess(executable string, args, env []string, logPath string) (*benchProcess, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	cmd := exec.Command(executable, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("bench: start %s %s: %w", executable, strings.Join(args, " "), err)
	}
	p := &benchProcess{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// stop ends the process as an operator would (SIGTERM: the worker drains
// and closes its pool), killing it if it is still there after 30 s.
func (p *benchProcess) stop() error {
	select {
	case <-p.done:
		return p.exitError()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.exitError()
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("worker process %d did not stop within 30 s of SIGTERM; log: %s", p.cmd.Process.Pid, tail(p.log))
	}
}

func (p *benchProcess) exitError() error {
	if p.err != nil {
		return fmt.Errorf("worker process %d: %w; log: %s", p.cmd.Process.Pid, p.err, tail(p.log))
	}
	return nil
}

func logs(procs []*benchProcess) string {
	var b strings.Builder
	for _, p := range procs {
		fmt.Fprintf(&b, "\nworker process %d: %s", p.cmd.Process.Pid, tail(p.log))
	}
	return b.String()
}

// tail is the end of a log file, for an error message.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}

// waitForReady waits until every process has written ready to its log:
// its worker has started polling. (DescribeTaskQueue cannot tell: it lists
// the pollers of one partition of the queue, and a process's few pollers
// may all be on others until their long polls end, a minute later.)
func waitForReady(ctx context.Context, procs []*benchProcess, ready string) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		polling := 0
		for _, p := range procs {
			if data, err := os.ReadFile(p.log); err == nil && strings.Contains(string(data), ready) {
				polling++
			}
		}
		if polling == len(procs) {
			return nil
		}
		for _, p := range procs {
			select {
			case <-p.done:
				return fmt.Errorf("worker process %d exited before it polled (%v); log: %s", p.cmd.Process.Pid, p.err, tail(p.log))
			default:
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the workers did not all start within 90 s%s", logs(procs))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startEngineWorker starts an agentsaga worker in this process on store,
// polling queue with the fleet retry bucket named bucket, with workflows
// registered beside the engine's; the caller stops it.
func startEngineWorker(ctx context.Context, c client.Client, store *ledger.Store, queue, bucket string, workflows ...any) (sdkworker.Worker, error) {
	w, err := worker.New(ctx, c, store, worker.Options{Config: agentsaga.Config{TaskQueue: queue, Bucket: bucket}})
	if err != nil {
		return nil, err
	}
	for _, wf := range workflows {
		w.RegisterWorkflow(wf)
	}
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	return w, nil
}

// startEngineWorkerOn is startEngineWorker on a ledger store of its own,
// on databaseURL; stop stops both.
func startEngineWorkerOn(ctx context.Context, c client.Client, databaseURL, queue, bucket string, workflows ...any) (stop func(), err error) {
	store, err := ledger.Open(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	w, err := startEngineWorker(ctx, c, store, queue, bucket, workflows...)
	if err != nil {
		store.Close()
		return nil, err
	}
	return func() { w.Stop(); store.Close() }, nil
}

// benchDatabase is the scenario's own database, so that what Postgres
// counts in it is the agentsaga workers' alone.
type benchDatabase struct {
	// url keeps the server URL's settings; plainURL drops the pool_*
	// ones, which only pgxpool reads (libpq and pgx's own parser would
	// send them to the server).
	url, plainURL, adminURL, name string
	// starter, when set, is the application_name of the bench's own
	// connections, which stay open while the workers stop.
	starter string
	// statementsView is set when pg_stat_statements is loaded: statements
	// are then counted as statements, not as transactions.
	statementsView bool
}

func newBenchDatabase(ctx context.Context, serverURL string) (*benchDatabase, error) {
	return newBenchDatabaseFor(ctx, serverURL, "fleet", true)
}

// newBenchDatabaseFor creates a database named for kind; migrate applies
// agentsaga's migrations to it (DBOS's database has its own schema only).
func newBenchDatabaseFor(ctx context.Context, serverURL, kind string, migrate bool) (*benchDatabase, error) {
	u, err := url.Parse(serverURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("bench: %s: DATABASE_URL must be a postgres:// URL (got %q): %v", kind, serverURL, err)
	}
	base := strings.TrimPrefix(u.Path, "/")
	if base == "" {
		base = "agentsaga"
	}
	db := &benchDatabase{name: base + "_" + kind + "_" + nonce()}
	u.Path = "/" + db.name
	db.url = u.String()
	q := u.Query()
	for key := range q {
		if strings.HasPrefix(key, "pool_") {
			q.Del(key)
		}
	}
	u.RawQuery = q.Encode()
	db.plainURL = u.String()
	u.Path = "/postgres"
	db.adminURL = u.String()
	admin, err := pgx.Connect(ctx, db.adminURL)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: connect to postgres: %w", kind, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("bench: %s: create database %s: %w", kind, db.name, err)
	}
	if migrate {
		if _, err := migrations.Apply(ctx, db.plainURL); err != nil {
			db.drop()
			return nil, err
		}
	}
	conn, err := pgx.Connect(ctx, db.plainURL)
	if err != nil {
		db.drop()
		return nil, fmt.Errorf("bench: %s: connect to %s: %w", kind, db.name, err)
	}
	defer conn.Close(ctx)
	// The view answers only when the library is in shared_preload_libraries.
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err == nil {
		var n int64
		db.statementsView = conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_statements").Scan(&n) == nil
	}
	return db, nil
}

func (db *benchDatabase) source() string {
	if db.statementsView {
		return "pg_stat_statements (calls, in the scenario's database)"
	}
	return "pg_stat_database (xact_commit + xact_rollback of the scenario's database: one per autocommit statement, once for a batch or an explicit transaction; pg_stat_statements is not loaded)"
}

// workerURL is the database's URL with the workers' pool size.
func (db *benchDatabase) workerURL(poolMaxConns int) string {
	u, _ := url.Parse(db.url)
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(poolMaxConns))
	u.RawQuery = q.Encode()
	return u.String()
}

type pgCounters struct {
	statements, bucketUpdates, deadlocks int64
	// writes is the rows each table had inserted, updated and deleted.
	writes map[string]TableWrites
}

// TableWrites is a table's rows inserted, updated and deleted.
type TableWrites struct {
	Inserted int64 `json:"inserted"`
	Updated  int64 `json:"updated"`
	Deleted  int64 `json:"deleted"`
}

// read takes the counters on fresh connections, so that no cached stats
// snapshot answers. The database-wide count is read from the postgres
// database, and the bucket's on a connection to the scenario's, whose own
// query the window counts: one, on both sides, so the plain side's
// baseline takes it back out.
func (db *benchDatabase) read(ctx context.Context) (pgCounters, error) {
	var c pgCounters
	admin, err := connectSimple(ctx, db.adminURL)
	if err != nil {
		return c, fmt.Errorf("bench: fleet: read counters: %w", err)
	}
	defer admin.Close(ctx)
	if err := admin.QueryRow(ctx, "SELECT xact_commit + xact_rollback, deadlocks FROM pg_stat_database WHERE datname = $1", db.name).Scan(&c.statements, &c.deadlocks); err != nil {
		return c, fmt.Errorf("bench: fleet: read pg_stat_database: %w", err)
	}
	conn, err := connectSimple(ctx, db.url)
	if err != nil {
		return c, fmt.Errorf("bench: fleet: read counters: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables")
	if err != nil {
		return c, fmt.Errorf("bench: fleet: read pg_stat_user_tables: %w", err)
	}
	c.writes = map[string]TableWrites{}
	for rows.Next() {
		var table string
		var w TableWrites
		if err := rows.Scan(&table, &w.Inserted, &w.Updated, &w.Deleted); err != nil {
			return c, fmt.Errorf("bench: fleet: read pg_stat_user_tables: %w", err)
		}
		c.writes[table] = w
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("bench: fleet: read pg_stat_user_tables: %w", err)
	}
	c.bucketUpdates = c.writes["retry_buckets"].Updated
	if db.statementsView {
		// The view counts as it goes; this scenario's own reads are left out.
		err := conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat%'`).Scan(&c.statements)
		if err != nil {
			return c, fmt.Errorf("bench: fleet: read pg_stat_statements: %w", err)
		}
	}
	return c, nil
}

// connectSimple connects with the simple protocol: a query is then one
// transaction, where pgx's default would first prepare it in another.
func connectSimple(ctx context.Context, databaseURL string) (*pgx.Conn, error) {
	config, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	config.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	return pgx.ConnectConfig(ctx, config)
}

// waitForNoClients waits until no client is connected to the database: a
// backend flushes its counters as it exits, so they are all in.
func (db *benchDatabase) waitForNoClients(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, db.adminURL)
	if err != nil {
		return fmt.Errorf("bench: fleet: %w", err)
	}
	defer admin.Close(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var clients int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend' AND application_name <> $2",
			db.name, db.starter).Scan(&clients); err != nil {
			return fmt.Errorf("bench: fleet: read pg_stat_activity: %w", err)
		}
		if clients == 0 {
			// A leaving backend drops out of pg_stat_activity a moment
			// before its last counters are flushed.
			time.Sleep(200 * time.Millisecond)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: fleet: %d clients still connected to %s 30 s after the workers stopped", clients, db.name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (db *benchDatabase) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, db.adminURL)
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.name}.Sanitize()+" WITH (FORCE)")
}

// cpuSample is the CPU seconds each process had used, by PID, in the three
// groups a row reports.
type cpuSample struct{ workers, server, postgres map[int]float64 }

// sampleCPU reads the CPU time of the worker processes, of the dev server
// (the process started with --port serverPort) and of the Postgres backends
// whose process title names the scenario's database.
func sampleCPU(procs []*benchProcess, serverPort, database string) cpuSample {
	sample := cpuSample{workers: map[int]float64{}, server: map[int]float64{}, postgres: map[int]float64{}}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return sample
	}
	all, err := fs.AllProcs()
	if err != nil {
		return sample
	}
	workers := map[int]bool{}
	for _, p := range procs {
		workers[p.cmd.Process.Pid] = true
	}
	for _, proc := range all {
		group := sample.workers
		if !workers[proc.PID] {
			args, err := proc.CmdLine()
			if err != nil || len(args) == 0 {
				continue
			}
			switch title := strings.Join(args, " "); {
			case strings.Contains(title, "start-dev") && strings.Contains(title, "--port "+serverPort+" "):
				group = sample.server
			case strings.HasPrefix(title, "postgres: ") && strings.Contains(title, " "+database+" "):
				group = sample.postgres
			default:
				continue
			}
		}
		if stat, err := proc.Stat(); err == nil {
			group[proc.PID] = stat.CPUTime()
		}
	}
	return sample
}

// since is the CPU seconds used from before to s, by group; a process
// that began in between counts from zero.
func (s cpuSample) since(before cpuSample) (used struct{ workers, server, postgres float64 }) {
	delta := func(now, then map[int]float64) (sum float64) {
		for pid, cpu := range now {
			sum += cpu - then[pid]
		}
		return sum
	}
	used.workers, used.server, used.postgres = delta(s.workers, before.workers), delta(s.server, before.server), delta(s.postgres, before.postgres)
	return used
}

// loadAverage is the 1-minute load average, 0 where there is no /proc.
func loadAverage() float64 {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	load, err := fs.LoadAvg()
	if err != nil {
		return 0
	}
	return load.Load1
}

// processCPU is a process's user and system CPU seconds so far.
func processCPU(pid int) (float64, error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	stat, err := proc.Stat()
	if err != nil {
		return 0, err
	}
	return stat.CPUTime(), nil
}

// peakMiB is a process's peak resident memory (VmHWM).
func peakMiB(pid int) (float64, error) {
	kb, err := ProcStatusKB(pid, "VmHWM")
	return kb / 1024, err
}

// ProcStatusKB reads one of the kB fields of /proc/PID/status (VmHWM,
// VmRSS): a process's memory as the kernel counts it. The soak
// (cmd/agentsaga/soak_test.go) samples VmRSS with it too.
func ProcStatusKB(pid int, field string) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// loopback is a fake's HTTP server (a downstream, a provider, a tool) on a
// port of its own; a fake embeds it for its URL and Close.
type loopback struct {
	listener net.Listener
	server   *http.Server
}

// serve listens on addr ("127.0.0.1:0": any free port) and serves h there.
func (l *loopback) serve(addr string, h http.Handler) error {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	l.listener = listener
	l.server = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = l.server.Serve(listener) }()
	return nil
}

// URL is where the server serves.
func (l *loopback) URL() string { return "http://" + l.listener.Addr().String() }

// Close stops serving (nothing, if it never served).
func (l *loopback) Close() error {
	if l.server == nil {
		return nil
	}
	return l.server.Close()
}

// parseRunSpec parses a process scenario's run spec, with its search
// attributes on: the scenario's dev server has them registered, and its
// starter checks once, not at every start.
func parseRunSpec(label, yaml string) (agentsaga.RunSpec, error) {
	spec, err := workflows.ParseSpec([]byte(yaml))
	if err != nil {
		return spec, fmt.Errorf("%s: spec: %w", label, err)
	}
	spec.SearchAttributes = true
	return spec, nil
}

// wordCountTool is a spec's tools block with the built-in word_count tool,
// which the rate-limit and spend scenarios' models call.
var wordCountTool = fmt.Sprintf(`tools:
  - name: %s
    kind: go
    description: Count the words in a text.
    parameters: %s
`, rateLimitTool, rateLimitToolSchema)

// newTable starts a benchmark's table on out: a tab writer (two spaces
// between columns) with header, tab-separated, as its first line. The
// caller writes the rows and flushes it.
func newTable(out io.Writer, header string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	return tw
}

// targetCell is a table's TARGET cell: "-" for a row without a target,
// else the bound and whether the row met it.
func targetCell(has bool, bound string, met bool) string {
	if !has {
		return "-"
	}
	return bound + " (" + verdict(met) + ")"
}

// verdict is a target's verdict in most tables: met, or MISSED.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "MISSED"
}

// met is a stream target's verdict: met, or not met.
func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// printTargets writes a scenario's targets under title, one a line: the
// target, the figure and the verdict.
func printTargets(out io.Writer, title string, targets []LongTarget) {
	fmt.Fprintln(out, "  "+title+":")
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	for _, t := range targets {
		fmt.Fprintf(tw, "    %s\t%s\t%s\n", t.Target, t.Figure, t.Verdict)
	}
	tw.Flush()
}

// Percentiles of a sample.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	Max float64 `json:"max"`
}

func percentiles(sample []float64) Percentiles {
	if len(sample) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(sample)
	slices.Sort(s)
	at := func(q float64) float64 { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return Percentiles{N: len(s), P50: at(0.50), P95: at(0.95), Max: s[len(s)-1]}
}

// quantile is the q-quantile of xs (nearest rank); 0 for none.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Sorted(slices.Values(xs))
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// median is the median of xs (the mean of the middle two for an even
// count).
func median(xs []float64) float64 {
	xs = slices.Sorted(slices.Values(xs))
	if len(xs)%2 == 0 {
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return xs[len(xs)/2]
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runIDs are n workflow IDs, prefix-0 to prefix-(n-1).
func runIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ids
}

// nonce is 8 random hex digits, for names that must not collide.
func nonce() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
