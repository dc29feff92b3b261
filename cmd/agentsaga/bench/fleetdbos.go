package bench

// This file owns the fleet scenario's DBOS Transact contender: the agent
// loop the other contenders run (a model step, the tool calls at once, a
// model step), written as a DBOS workflow with steps on a Postgres database
// of its own; its worker processes (`agentsaga bench dbos-worker`), how the
// bench enqueues and awaits its runs, and how its step times are read back
// from DBOS's own tables.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	// FleetDBOSContender is the DBOS row's name.
	FleetDBOSContender = "DBOS Transact agent loop"
	// FleetDBOSServer is the DBOS rows' server: it needs none but Postgres.
	FleetDBOSServer = "postgres"
	// FleetDBOSReady is what `agentsaga bench dbos-worker` prints once its
	// executor has launched and its queue runner polls.
	FleetDBOSReady = "dbos-worker: launched"
	// FleetDBOSQueue is the queue the bench enqueues the runs on: DBOS's
	// way to spread workflows over processes it did not start itself.
	FleetDBOSQueue = "bench-fleet-dbos"
	// FleetDBOSWorkflowName is the workflow's registered name, which the
	// bench's client enqueues by.
	FleetDBOSWorkflowName = "FleetDBOSWorkflow"
	// fleetDBOSVersion pins the executors' and the client's application
	// version: by default an executor's version is a hash of its binary,
	// and a queue hands a workflow only to executors of its version.
	fleetDBOSVersion = "bench-fleet"
	// fleetStarterName is the application_name of the bench's own
	// connections to DBOS's database.
	fleetStarterName = "agentsaga-bench-starter"
	// FleetDBOSPollInterval is the queue's polling interval. DBOS's default
	// is 1 s, which alone would put about half a second before each run's
	// first step; Temporal's workers long-poll and get a task at once. At
	// 100 ms each executor's dequeue query runs ten times a second, which
	// is counted in its Postgres CPU.
	FleetDBOSPollInterval = 100 * time.Millisecond
)

// FleetDBOSInput is one run of FleetDBOSWorkflow, with the timeout and
// retry policy agentsaga's AgentRun gives a tool call.
type FleetDBOSInput struct {
	URL         string        `json:"url"`
	Calls       int           `json:"calls"`
	Timeout     time.Duration `json:"timeout"`
	BaseBackoff time.Duration `json:"base_backoff"`
	MaxBackoff  time.Duration `json:"max_backoff"`
	MaxAttempts int           `json:"max_attempts"`
}

// FleetDBOSWorkflow is the plain agent loop as a DBOS workflow: a model
// step that answers at once (BaselineModelTurn), the calls it names as
// steps started together (dbos.Go), then a model step. Each step's output
// is checkpointed in Postgres before the workflow goes on.
func FleetDBOSWorkflow(ctx dbos.Context, in FleetDBOSInput) (int, error) {
	turn := func(c context.Context) ([]string, error) { return BaselineModelTurn(c, in.Calls) }
	names, err := dbos.RunAsStep(ctx, turn, dbos.WithStepName("model"))
	if err != nil {
		return 0, fmt.Errorf("model step 1: %w", err)
	}
	id, err := dbos.GetWorkflowID(ctx)
	if err != nil {
		return 0, fmt.Errorf("workflow ID: %w", err)
	}
	retries := []dbos.StepOption{dbos.WithStepName("call"), dbos.WithStepMaxRetries(max(in.MaxAttempts-1, 0)),
		dbos.WithStepBaseInterval(in.BaseBackoff), dbos.WithStepMaxInterval(in.MaxBackoff), dbos.WithStepBackoffFactor(2)}
	outcomes := make([]<-chan dbos.StepOutcome[bool], len(names))
	for i, name := range names {
		// One key a call of a run, as the Temporal contenders send.
		key := callKey(id, name)
		var attempt atomic.Int32
		call := func(c context.Context) (bool, error) {
			c, cancel := context.WithTimeout(c, in.Timeout)
			defer cancel()
			return true, post(c, in.URL, key, strconv.Itoa(int(attempt.Add(1))))
		}
		if outcomes[i], err = dbos.Go(ctx, call, retries...); err != nil {
			return 0, fmt.Errorf("start %s: %w", name, err)
		}
	}
	var errs []error
	for i, outcome := range outcomes {
		if o := <-outcome; o.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", names[i], o.Err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if _, err := dbos.RunAsStep(ctx, turn, dbos.WithStepName("model")); err != nil {
		return 0, fmt.Errorf("model step 2: %w", err)
	}
	return len(names), nil
}

// RunFleetDBOSWorker is one DBOS executor of the fleet scenario (`agentsaga
// bench dbos-worker`): it registers the workflow, launches, and serves the
// bench's queue until ctx ends.
func RunFleetDBOSWorker(ctx context.Context, out io.Writer, databaseURL string) error {
	// Not under ctx: its end is the signal to shut down cleanly, which
	// ending the DBOS context first would cut short.
	dctx, err := dbos.NewContext(context.Background(), dbos.Config{AppName: "agentsaga-bench-fleet", DatabaseURL: databaseURL,
		ApplicationVersion: fleetDBOSVersion, ExecutorID: fmt.Sprintf("fleet-%d", os.Getpid()),
		Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return fmt.Errorf("bench: dbos-worker: new DBOS context: %w", err)
	}
	dbos.RegisterWorkflow(dctx, FleetDBOSWorkflow, dbos.WithWorkflowName(FleetDBOSWorkflowName))
	if err := dbos.Launch(dctx); err != nil {
		return fmt.Errorf("bench: dbos-worker: launch: %w", err)
	}
	fmt.Fprintf(out, "%s on queue %q\n", FleetDBOSReady, FleetDBOSQueue)
	<-ctx.Done()
	if err := dbos.Shutdown(dctx, 20*time.Second); err != nil {
		return fmt.Errorf("bench: dbos-worker: shutdown: %w", err)
	}
	return nil
}

// fleetDBOS is the bench's side of the DBOS contender: a client that
// enqueues the runs, and one poller that waits for all of them. A handle's
// GetResult polls its own run every second by default: 200 of them at a
// shorter interval would put thousands of queries a second on the
// Postgres being measured, at the default they would end each window up to
// a second late.
type fleetDBOS struct {
	db     *benchDatabase
	client dbos.Client
	input  FleetDBOSInput
	// pool is the client's and the poller's.
	pool *pgxpool.Pool

	mu      sync.Mutex
	pending map[string]chan error
	stop    context.CancelFunc
	stopped chan struct{}
}

// newFleetDBOS creates the DBOS database beside the scenario's, migrates
// it, registers the queue and starts the completion poller.
func newFleetDBOS(ctx context.Context, serverURL string, in FleetDBOSInput) (*fleetDBOS, error) {
	db, err := newBenchDatabaseFor(ctx, serverURL, "dbos", false)
	if err != nil {
		return nil, err
	}
	d := &fleetDBOS{db: db, input: in, pending: map[string]chan error{}, stopped: make(chan struct{})}
	if err := d.open(ctx); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// newFleetDBOSLoop is newFleetDBOS for runs of calls calls to down, with
// the timeout and retry policy the other contenders' tool calls have.
func newFleetDBOSLoop(ctx context.Context, serverURL string, down *Downstream, calls int) (*fleetDBOS, error) {
	spec, err := fleetSpec(down.URL(), calls)
	if err != nil {
		return nil, err
	}
	retry := spec.Retry.WithDefaults()
	return newFleetDBOS(ctx, serverURL, FleetDBOSInput{URL: down.URL(), Calls: calls, Timeout: spec.Tools[0].Timeout(),
		BaseBackoff: retry.Backoff().Base, MaxBackoff: retry.Backoff().Cap, MaxAttempts: retry.MaxAttempts})
}

func (d *fleetDBOS) open(ctx context.Context) error {
	if err := dbos.Migrate(ctx, d.db.url); err != nil {
		return fmt.Errorf("bench: fleet: migrate the DBOS database %s: %w", d.db.name, err)
	}
	// The bench's own connections carry a name of their own, so that the
	// wait for the executors' connections to close passes them over.
	config, err := pgxpool.ParseConfig(d.db.url)
	if err != nil {
		return fmt.Errorf("bench: fleet: DBOS database URL: %w", err)
	}
	config.ConnConfig.RuntimeParams["application_name"] = fleetStarterName
	if d.pool, err = pgxpool.NewWithConfig(ctx, config); err != nil {
		return fmt.Errorf("bench: fleet: connect to %s: %w", d.db.name, err)
	}
	d.db.starter = fleetStarterName
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	client, err := dbos.NewClient(ctx, dbos.ClientConfig{SystemDBPool: d.pool, AppName: "agentsaga-bench-fleet", Logger: quiet})
	if err != nil {
		return fmt.Errorf("bench: fleet: DBOS client: %w", err)
	}
	d.client = client
	if _, err := dbos.RegisterQueue(client, FleetDBOSQueue, dbos.WithQueueBasePollingInterval(FleetDBOSPollInterval)); err != nil {
		return fmt.Errorf("bench: fleet: register the DBOS queue: %w", err)
	}
	pollCtx, stop := context.WithCancel(context.Background())
	d.stop = stop
	go d.poll(pollCtx)
	return nil
}

func (d *fleetDBOS) close() {
	if d.stop != nil {
		d.stop()
		<-d.stopped
	}
	if d.client != nil {
		_ = dbos.Shutdown(d.client, 10*time.Second)
	}
	if d.pool != nil {
		d.pool.Close()
	}
	d.db.drop()
}

// side is the DBOS contender's fleetSide.
func (d *fleetDBOS) side() fleetSide {
	return fleetSide{contender: FleetDBOSContender, ready: FleetDBOSReady, db: d.db, usesPostgres: true,
		args: []string{"bench", "dbos-worker"}, env: []string{"DBOS_SYSTEM_DATABASE_URL=" + d.db.url},
		start: func(ctx context.Context, id string) (func(context.Context) error, error) {
			done := make(chan error, 1)
			d.mu.Lock()
			d.pending[id] = done
			d.mu.Unlock()
			if _, err := dbos.Enqueue[int](d.client, FleetDBOSQueue, FleetDBOSWorkflowName, d.input,
				dbos.WithEnqueueWorkflowID(id), dbos.WithEnqueueApplicationVersion(fleetDBOSVersion)); err != nil {
				d.mu.Lock()
				delete(d.pending, id)
				d.mu.Unlock()
				return nil, fmt.Errorf("bench: fleet: enqueue %s: %w", id, err)
			}
			return func(ctx context.Context) error {
				select {
				case err := <-done:
					return err
				case <-ctx.Done():
					return fmt.Errorf("bench: fleet: run %s: %w", id, ctx.Err())
				}
			}, nil
		},
		timings: d.timings,
		// The enqueues' counters: the pool opens new connections for the
		// next measurement.
		release: d.pool.Reset}
}

// poll reads, every 20 ms, which pending runs have ended: one query on one
// connection whatever the number of runs.
func (d *fleetDBOS) poll(ctx context.Context) {
	defer close(d.stopped)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
		d.mu.Lock()
		ids := make([]string, 0, len(d.pending))
		for id := range d.pending {
			ids = append(ids, id)
		}
		d.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		rows, err := d.pool.Query(ctx, `SELECT workflow_uuid, status, coalesce(error, '') FROM dbos.workflow_status
			WHERE workflow_uuid = ANY($1) AND status NOT IN ('ENQUEUED', 'PENDING', 'DELAYED')`, ids)
		if err != nil {
			continue // the run's own timeout reports a poller that never reads
		}
		for rows.Next() {
			var id, status, message string
			if rows.Scan(&id, &status, &message) != nil {
				continue
			}
			var err error
			if status != "SUCCESS" {
				err = fmt.Errorf("bench: fleet: run %s ended %s: %s", id, status, message)
			}
			d.mu.Lock()
			if done, ok := d.pending[id]; ok {
				done <- err
				delete(d.pending, id)
			}
			d.mu.Unlock()
		}
		rows.Close()
	}
}

// timings reads the runs' step times from DBOS's tables: when each run was
// enqueued, which executor ran it, and each step's start and end (in
// milliseconds, as DBOS records them).
func (d *fleetDBOS) timings(ctx context.Context, ids []string) (latencies, error) {
	l := latencies{workers: map[string]bool{}}
	runs := map[string]*runTimeline{}
	rows, err := d.pool.Query(ctx, `SELECT workflow_uuid, created_at, coalesce(executor_id, '') FROM dbos.workflow_status WHERE workflow_uuid = ANY($1)`, ids)
	if err != nil {
		return l, fmt.Errorf("bench: fleet: read dbos.workflow_status: %w", err)
	}
	for rows.Next() {
		var id, executor string
		var created int64
		if err := rows.Scan(&id, &created, &executor); err != nil {
			rows.Close()
			return l, fmt.Errorf("bench: fleet: read dbos.workflow_status: %w", err)
		}
		runs[id] = &runTimeline{began: time.UnixMilli(created)}
		l.workers[executor] = true
	}
	rows.Close()
	rows, err = d.pool.Query(ctx, `SELECT workflow_uuid, function_name, started_at_epoch_ms, completed_at_epoch_ms FROM dbos.operation_outputs
		WHERE workflow_uuid = ANY($1) AND started_at_epoch_ms IS NOT NULL AND completed_at_epoch_ms IS NOT NULL`, ids)
	if err != nil {
		return l, fmt.Errorf("bench: fleet: read dbos.operation_outputs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, name string
		var started, completed int64
		if err := rows.Scan(&id, &name, &started, &completed); err != nil {
			return l, fmt.Errorf("bench: fleet: read dbos.operation_outputs: %w", err)
		}
		run := runs[id]
		if run == nil {
			continue
		}
		l.activities++
		span := stepSpan{model: name == "model", start: time.UnixMilli(started), end: time.UnixMilli(completed)}
		run.steps = append(run.steps, span)
		if !span.model {
			l.calls++
			l.running += span.end.Sub(span.start)
		}
	}
	if err := rows.Err(); err != nil {
		return l, fmt.Errorf("bench: fleet: read dbos.operation_outputs: %w", err)
	}
	for _, run := range runs {
		l.add(*run)
	}
	return l, nil
}
