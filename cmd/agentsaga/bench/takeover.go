package bench

// This file owns the takeover scenario (`agentsaga bench takeover`): one
// agent run at a time on two worker processes, the process that holds the
// run's in-flight tool calls killed with SIGKILL, and the time until the
// run goes on, for agentsaga on Temporal and for the DBOS contender of the
// fleet scenario (fleetdbos.go) recovered by a restarted executor or by a
// surviving one.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/dbos-inc/dbos-transact-golang/dbos/internals"
	enumspb "go.temporal.io/api/enums/v1"
)

// The takeover scenario's contenders.
const (
	// TakeoverAgentsaga kills an `agentsaga worker`: Temporal hands the
	// killed attempts to the other worker once their heartbeat timeout
	// passes.
	TakeoverAgentsaga = "agentsaga"
	// TakeoverDBOSRestart kills a DBOS executor and starts it again at
	// once with the same executor ID, as a supervisor would: its launch
	// re-enqueues its PENDING workflows.
	TakeoverDBOSRestart = "dbos-restart"
	// TakeoverDBOSSurvivor kills a DBOS executor and leaves it dead: the
	// bench runs, at the kill, the recovery pass DBOS Conductor would have
	// a surviving executor run for the dead one's executor ID.
	TakeoverDBOSSurvivor = "dbos-survivor"
)

var takeoverNames = map[string]string{
	TakeoverAgentsaga:    "agentsaga (Temporal takeover)",
	TakeoverDBOSRestart:  "DBOS, executor restarted",
	TakeoverDBOSSurvivor: "DBOS, surviving executor",
}

// TakeoverConfig sizes the takeover scenario: for each contender, Kills
// runs one after another, each of Calls tool calls that take CallLatency
// at the downstream, and one kill in each.
type TakeoverConfig struct {
	Contenders  []string      `json:"contenders"`
	Kills       int           `json:"kills"`
	Calls       int           `json:"calls"`
	CallLatency time.Duration `json:"call_latency"`
	// KillAfter is how long after the run's last call reached the
	// downstream the kill comes: inside every call still in flight.
	KillAfter time.Duration `json:"kill_after"`

	ProcessScenario
}

// DefaultTakeover kills five runs a contender. The calls take 5 s so that a
// kill lands inside them even when a loaded machine spreads their starts.
var DefaultTakeover = TakeoverConfig{Contenders: []string{TakeoverAgentsaga, TakeoverDBOSRestart, TakeoverDBOSSurvivor},
	Kills: 5, Calls: 10, CallLatency: 5 * time.Second, KillAfter: 500 * time.Millisecond}

// TakeoverKill is one kill, its times from the kill, read from the
// downstream's log of requests.
type TakeoverKill struct {
	Run string `json:"run"`
	// Killed is the killed process: its PID or its executor ID.
	Killed string `json:"killed"`
	// ResumedMs is the time to the first call sent again, AllResentMs to
	// the last, DoneMs to the run's end.
	ResumedMs   float64 `json:"resumed_ms"`
	AllResentMs float64 `json:"all_resent_ms"`
	DoneMs      float64 `json:"done_ms"`
	// Requests is what the downstream received for the run; Keys, its
	// distinct Idempotency-Keys; Resent, the keys it received more than
	// once (the calls the kill cut short, sent again after it); Lost, the
	// run's calls whose key it never received.
	Requests int `json:"requests"`
	Keys     int `json:"keys"`
	Resent   int `json:"resent_keys"`
	Lost     int `json:"lost_calls"`
	// ResumedBy is who ran the run to its end.
	ResumedBy   string  `json:"resumed_by,omitempty"`
	LoadAverage float64 `json:"load_average_1m"`
}

// TakeoverRow is one contender's kills.
type TakeoverRow struct {
	Contender string         `json:"contender"`
	Kills     []TakeoverKill `json:"kills"`
	// Dominant is the setting the time until the run goes on is mostly
	// made of.
	Dominant string `json:"dominant_setting"`
}

// TakeoverResult is the scenario's rows.
type TakeoverResult struct {
	Config TakeoverConfig `json:"config"`
	Rows   []TakeoverRow  `json:"rows"`
}

// requestLog is the downstream's requests in order of arrival.
type requestLog struct {
	mu       sync.Mutex
	requests []loggedRequest
}

type loggedRequest struct {
	at  time.Time
	key string
}

func (l *requestLog) wrap(d *Downstream) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.requests = append(l.requests, loggedRequest{time.Now(), r.Header.Get("Idempotency-Key")})
		l.mu.Unlock()
		d.ServeHTTP(w, r)
	})
}

func (l *requestLog) since(mark int) []loggedRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.requests[mark:])
}

func (l *requestLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.requests)
}

// takeoverSide is one contender's two worker processes and what it does
// around a kill.
type takeoverSide struct {
	name     string
	args     []string
	env      func(i int) []string
	ready    string
	procs    []*benchProcess
	start    func(ctx context.Context, id string) (func(context.Context) error, error)
	dominant string
	// holder is the index of the process holding the run's in-flight
	// calls, and its name.
	holder func(ctx context.Context, id string) (int, string, error)
	// afterKill, when set, is what a supervisor or a recovery pass does at
	// once (restarted reports that it started the process again).
	afterKill func(ctx context.Context, i int, killed string) (restarted bool, err error)
	// resumedBy, when set, names who ran the run to its end.
	resumedBy func(ctx context.Context, id string) string
	dir       string
	exe       string
}

func (cfg TakeoverConfig) validate() error {
	if cfg.Kills < 1 || cfg.Calls < 1 || cfg.CallLatency <= 0 || cfg.KillAfter < 0 || cfg.KillAfter >= cfg.CallLatency {
		return fmt.Errorf("bench: takeover: kills %d and calls %d must be positive, and the kill (%s after the last call) inside the call latency %s",
			cfg.Kills, cfg.Calls, cfg.KillAfter, cfg.CallLatency)
	}
	return checkContenders("bench: takeover", cfg.Contenders, takeoverNames)
}

// Takeover runs the takeover scenario.
func Takeover(ctx context.Context, cfg TakeoverConfig) (TakeoverResult, error) {
	return inScratchDir("bench: takeover", "takeover", cfg.validate(), TakeoverResult{Config: cfg}, func(dir string, result *TakeoverResult) error {
		log := &requestLog{}
		down, err := serveDownstream("127.0.0.1:0", Faults{Latency: cfg.CallLatency}, 1, log.wrap)
		if err != nil {
			return err
		}
		defer down.Close()
		for _, contender := range cfg.Contenders {
			row, err := takeoverContender(ctx, cfg, contender, dir, down, log)
			if err != nil {
				return fmt.Errorf("bench: takeover: %s: %w", takeoverNames[contender], err)
			}
			result.Rows = append(result.Rows, row)
		}
		return nil
	})
}

func takeoverContender(ctx context.Context, cfg TakeoverConfig, contender, dir string, down *Downstream, log *requestLog) (TakeoverRow, error) {
	row := TakeoverRow{Contender: takeoverNames[contender]}
	side := &takeoverSide{name: contender, dir: dir, exe: cfg.Executable}
	var cleanup func()
	var err error
	if contender == TakeoverAgentsaga {
		cleanup, err = side.agentsaga(ctx, cfg, down)
	} else {
		cleanup, err = side.dbos(ctx, cfg, down, contender)
	}
	if cleanup != nil {
		defer cleanup()
	}
	if err != nil {
		return row, err
	}
	row.Dominant = side.dominant
	defer func() {
		for _, p := range side.procs {
			_ = p.stop()
		}
	}()
	for i := range 2 {
		if err := side.startProcess(i); err != nil {
			return row, err
		}
	}
	if err := waitForReady(ctx, side.procs, side.ready); err != nil {
		return row, err
	}
	for k := range cfg.Kills {
		kill, err := side.kill(ctx, cfg, log, fmt.Sprintf("takeover-%s-%s-%d", contender, nonce(), k))
		if err != nil {
			return row, err
		}
		row.Kills = append(row.Kills, kill)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "takeover: %s: kill %d of %d: %s killed, %d calls cut, first call again after %.0f ms, run done after %.0f ms\n",
				row.Contender, k+1, cfg.Kills, kill.Killed, kill.Resent, kill.ResumedMs, kill.DoneMs)
		}
	}
	return row, nil
}

func (s *takeoverSide) startProcess(i int) error {
	p, err := startProcess(s.exe, s.args, s.env(i), filepath.Join(s.dir, fmt.Sprintf("%s-%d-%s.log", s.name, i, nonce())))
	if err != nil {
		return err
	}
	if i < len(s.procs) {
		s.procs[i] = p
	} else {
		s.procs = append(s.procs, p)
	}
	return nil
}

// agentsaga is two `agentsaga worker` processes on a dev server in memory
// and a database of their own; the holder is the worker that started the
// most of the run's pending tool calls.
func (s *takeoverSide) agentsaga(ctx context.Context, cfg TakeoverConfig, down *Downstream) (func(), error) {
	server, err := startBenchServer(ctx, cfg.TemporalBin, s.dir, serverOptions{})
	if err != nil {
		return nil, err
	}
	db, err := newBenchDatabase(ctx, cfg.DatabaseURL)
	if err != nil {
		server.stop()
		return nil, err
	}
	cleanup := func() { db.drop(); server.stop() }
	spec, err := fleetSpec(down.URL(), cfg.Calls)
	if err != nil {
		return cleanup, err
	}
	env := append(slices.Clip(server.env), "DATABASE_URL="+db.workerURL(DefaultFleet.PoolMaxConns))
	s.args, s.env, s.ready = []string{"worker", "--retention", "-1s"}, func(int) []string { return env }, "agentsaga worker running"
	s.start = startAgentsagaRun(server.c, spec)
	s.dominant = fmt.Sprintf("the tool call's heartbeat timeout (min(tool timeout, 10 s) = %s here), then the retry's backoff (%s) and a poll of the other worker",
		min(spec.Tools[0].Timeout(), 10*time.Second), spec.Retry.WithDefaults().Backoff().Base)
	s.holder = func(ctx context.Context, id string) (int, string, error) {
		desc, err := server.c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return 0, "", fmt.Errorf("describe %s: %w", id, err)
		}
		held := map[int]int{}
		for _, a := range desc.GetPendingActivities() {
			if a.GetState() != enumspb.PENDING_ACTIVITY_STATE_STARTED || a.GetActivityType().GetName() != "agentsaga.CallTool" {
				continue
			}
			pid, _, _ := strings.Cut(a.GetLastWorkerIdentity(), "@")
			for i, p := range s.procs {
				if strconv.Itoa(p.cmd.Process.Pid) == pid {
					held[i]++
				}
			}
		}
		if len(held) == 0 {
			return 0, "", fmt.Errorf("run %s has no tool call started by the scenario's workers", id)
		}
		best := 0
		if held[1] > held[0] {
			best = 1
		}
		return best, fmt.Sprintf("worker %d", s.procs[best].cmd.Process.Pid), nil
	}
	return cleanup, nil
}

// dbos is two `agentsaga bench dbos-worker` executors with the executor
// IDs takeover-0 and takeover-1 (DBOS__VMID), on the fleet's DBOS database
// and queue; the holder is the executor the run's workflow_status names.
func (s *takeoverSide) dbos(ctx context.Context, cfg TakeoverConfig, down *Downstream, contender string) (func(), error) {
	d, err := newFleetDBOSLoop(ctx, cfg.DatabaseURL, down, cfg.Calls)
	if err != nil {
		return nil, err
	}
	side := d.side()
	s.args, s.ready, s.start = side.args, side.ready, side.start
	s.env = func(i int) []string { return append(slices.Clip(side.env), "DBOS__VMID="+takeoverExecutor(i)) }
	executorOf := func(ctx context.Context, id string) (string, error) {
		var executor string
		err := d.pool.QueryRow(ctx, `SELECT coalesce(executor_id, '') FROM dbos.workflow_status WHERE workflow_uuid = $1`, id).Scan(&executor)
		if err != nil {
			return "", fmt.Errorf("read the executor of %s: %w", id, err)
		}
		return executor, nil
	}
	s.holder = func(ctx context.Context, id string) (int, string, error) {
		executor, err := executorOf(ctx, id)
		if err != nil {
			return 0, "", err
		}
		for i := range s.procs {
			if takeoverExecutor(i) == executor {
				return i, executor, nil
			}
		}
		return 0, "", fmt.Errorf("run %s is on executor %q, not one of the scenario's", id, executor)
	}
	s.resumedBy = func(ctx context.Context, id string) string {
		executor, _ := executorOf(ctx, id)
		return executor
	}
	if contender == TakeoverDBOSRestart {
		s.dominant = fmt.Sprintf("the supervisor's restart delay (none here) plus the executor's start and launch (its recovery pass), then a queue poll (every %s) by either executor",
			FleetDBOSPollInterval)
		s.afterKill = func(ctx context.Context, i int, _ string) (bool, error) {
			return true, s.startProcess(i)
		}
		return d.close, nil
	}
	// The recovery pass is the same UPDATE whichever process runs it; it
	// matches the executors' application version, so it runs on a DBOS
	// context of theirs, never launched: no queue runner of its own.
	recoverer, err := dbos.NewContext(context.Background(), dbos.Config{AppName: "agentsaga-bench-fleet", DatabaseURL: d.db.url,
		ApplicationVersion: fleetDBOSVersion, ExecutorID: "takeover-recoverer",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		d.close()
		return nil, fmt.Errorf("DBOS context for the recovery pass: %w", err)
	}
	rt, err := internals.RuntimeOf(recoverer)
	if err != nil {
		d.close()
		return nil, fmt.Errorf("DBOS runtime for the recovery pass: %w", err)
	}
	s.dominant = fmt.Sprintf("what detects the dead executor and asks for its recovery (DBOS Conductor; the bench asks at once here), then a queue poll (every %s) by the survivor",
		FleetDBOSPollInterval)
	s.afterKill = func(ctx context.Context, _ int, killed string) (bool, error) {
		if _, err := rt.RecoverPendingWorkflows([]string{killed}); err != nil {
			return false, fmt.Errorf("recover the workflows of executor %s: %w", killed, err)
		}
		return false, nil
	}
	return func() { _ = dbos.Shutdown(recoverer, 10*time.Second); d.close() }, nil
}

func takeoverExecutor(i int) string { return "takeover-" + strconv.Itoa(i) }

// kill starts one run, kills the process holding its calls once they are
// all in flight, and waits for the run's end; the process is started again
// after it, so that each kill finds two.
func (s *takeoverSide) kill(ctx context.Context, cfg TakeoverConfig, log *requestLog, id string) (TakeoverKill, error) {
	kill := TakeoverKill{Run: id, LoadAverage: loadAverage()}
	runCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	mark := log.len()
	wait, err := s.start(runCtx, id)
	if err != nil {
		return kill, err
	}
	for len(log.since(mark)) < cfg.Calls {
		select {
		case <-runCtx.Done():
			return kill, fmt.Errorf("run %s: %d of its %d calls reached the downstream: %w%s", id, len(log.since(mark)), cfg.Calls, runCtx.Err(), logs(s.procs))
		case <-time.After(20 * time.Millisecond):
		}
	}
	time.Sleep(cfg.KillAfter)
	i, name, err := s.holder(runCtx, id)
	if err != nil {
		return kill, err
	}
	kill.Killed = name
	victim := s.procs[i]
	killedAt := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		return kill, fmt.Errorf("kill -9 %s: %w", name, err)
	}
	<-victim.done
	restarted := false
	if s.afterKill != nil {
		if restarted, err = s.afterKill(runCtx, i, name); err != nil {
			return kill, err
		}
	}
	if err := wait(runCtx); err != nil {
		return kill, fmt.Errorf("after the kill of %s: %w%s", name, err, logs(s.procs))
	}
	kill.DoneMs = msSince(killedAt, time.Now())
	if s.resumedBy != nil {
		kill.ResumedBy = s.resumedBy(runCtx, id)
	}
	kill.measure(log.since(mark), killedAt, cfg.Calls)
	if !restarted {
		if err := s.startProcess(i); err != nil {
			return kill, err
		}
	}
	if err := waitForReady(ctx, s.procs, s.ready); err != nil {
		return kill, err
	}
	return kill, nil
}

// measure reads the run's requests: a key seen before the kill and again
// after it is a call the kill cut short and someone sent again.
func (k *TakeoverKill) measure(requests []loggedRequest, killedAt time.Time, calls int) {
	before, counts := map[string]bool{}, map[string]int{}
	var first, last time.Time
	for _, r := range requests {
		counts[r.key]++
		if r.at.Before(killedAt) {
			before[r.key] = true
			continue
		}
		if before[r.key] && counts[r.key] == 2 {
			if first.IsZero() {
				first = r.at
			}
			last = r.at
		}
	}
	k.Requests, k.Keys = len(requests), len(counts)
	for _, n := range counts {
		if n > 1 {
			k.Resent++
		}
	}
	k.Lost = max(calls-k.Keys, 0)
	if !first.IsZero() {
		k.ResumedMs, k.AllResentMs = msSince(killedAt, first), msSince(killedAt, last)
	}
}

func msSince(from, to time.Time) float64 { return float64(to.Sub(from).Microseconds()) / 1000 }

// Summary is a row's time to the first call sent again, p50 and max, and
// the calls sent twice and lost over its kills.
func (r TakeoverRow) Summary() (p50, maxMs float64, resent, lost int) {
	var resumed []float64
	for _, k := range r.Kills {
		resumed = append(resumed, k.ResumedMs)
		resent += k.Resent
		lost += k.Lost
	}
	if len(resumed) == 0 {
		return 0, 0, resent, lost
	}
	return median(resumed), slices.Max(resumed), resent, lost
}

// PrintTakeover writes one line a kill and one a contender.
func PrintTakeover(out io.Writer, result TakeoverResult) {
	cfg := result.Config
	fmt.Fprintf(out, "\ntakeover: one run at a time of %d tool calls (each %s at the downstream) between two model steps, on 2 worker processes;\n",
		cfg.Calls, cfg.CallLatency)
	fmt.Fprintf(out, "  %s after the run's last call reached the downstream, the process holding its calls is killed with SIGKILL\n", cfg.KillAfter)
	tw := newTable(out, "  CONTENDER\tKILLED\tCUT CALLS\tFIRST CALL AGAIN\tLAST CALL AGAIN\tRUN DONE\tREQUESTS\tKEYS\tLOST\tRESUMED BY\tLOAD")
	for _, r := range result.Rows {
		for _, k := range r.Kills {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%.0f ms\t%.0f ms\t%.0f ms\t%d\t%d\t%d\t%s\t%.1f\n", r.Contender, k.Killed, k.Resent,
				k.ResumedMs, k.AllResentMs, k.DoneMs, k.Requests, k.Keys, k.Lost, k.ResumedBy, k.LoadAverage)
		}
	}
	tw.Flush()
	fmt.Fprintln(out)
	for _, r := range result.Rows {
		p50, maxMs, resent, lost := r.Summary()
		fmt.Fprintf(out, "  %s: first call again p50 %.0f ms, max %.0f ms over %d kills; %d calls sent twice with the same key, %d lost\n",
			r.Contender, p50, maxMs, len(r.Kills), resent, lost)
		fmt.Fprintf(out, "    dominated by %s\n", r.Dominant)
	}
	fmt.Fprintln(out, "  CUT CALLS are the run's calls the downstream received again (same Idempotency-Key) after the kill: in flight when it came;")
	fmt.Fprintf(out, "  times are from the kill, by the downstream's clock; LOAD is the 1-minute load average at the run's start (%d cores)\n", runtime.NumCPU())
}
