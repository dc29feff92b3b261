package worker

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/migrations"
	"github.com/agentsaga/agentsaga/workflows"
)

// Defaults for a local dev server and Postgres.
const (
	DefaultTemporalAddress = "127.0.0.1:7233"
	defaultNamespace       = "default"
	defaultDatabaseURL     = "postgres://postgres@127.0.0.1:5432/agentsaga?sslmode=disable"
)

// Config says where the worker's Temporal and Postgres are.
type Config struct {
	// TemporalAddress and Namespace, when set, override what the profile
	// and the TEMPORAL_* variables say (see Dial).
	TemporalAddress string
	Namespace       string
	// Profile is the temporal.toml profile to read (--profile); empty
	// means TEMPORAL_PROFILE, else "default".
	Profile     string
	DatabaseURL string
	TaskQueue   string
	Logger      *slog.Logger
	// MetricsAddr serves Prometheus metrics at /metrics when set
	// (--metrics-addr, AGENTSAGA_METRICS_ADDR), e.g. 127.0.0.1:9464.
	MetricsAddr string
	// MetricsHandler receives the Temporal SDK's own metrics; Run sets it.
	MetricsHandler client.MetricsHandler
	// Deployment, when set, runs the worker as one build of a worker
	// deployment (--deployment, --build-id, --versioning).
	Deployment Deployment
	// Retention is how long the ledger keeps a finished run's rows
	// (--retention); zero means 30 days (ledgerdb.DefaultRunRetention), negative
	// turns the worker's cleaner off.
	Retention time.Duration
	// StopTimeout is how long a stopping worker lets the calls in flight
	// finish before it cancels them (the SDK's WorkerStopTimeout;
	// --stop-timeout, AGENTSAGA_STOP_TIMEOUT). ConfigFromEnv sets
	// the default, 60 s; zero cancels them at once, as the SDK does
	// unless told otherwise.
	StopTimeout time.Duration
	// PublicURL is where `agentsaga serve` is reached from outside
	// (AGENTSAGA_PUBLIC_URL, such as https://agents.example.com): the
	// links to a run in its webhooks start with it; paths when empty.
	PublicURL string
}

// defaultStopTimeout lets a typical tool call (an HTTP request of a few
// seconds, a model turn of up to a minute) finish when a rolling restart
// stops the worker, where the SDK's default of zero cancels it mid-flight
// and the call is attempted again elsewhere.
const defaultStopTimeout = 60 * time.Second

// ConfigFromEnv reads Temporal's connection as the `temporal` CLI does (the
// temporal.toml profile TEMPORAL_PROFILE names and the TEMPORAL_*
// variables; see Dial), DATABASE_URL and the AGENTSAGA_*
// variables, with local defaults for those not set. A stop timeout that
// does not parse is left at the default; use StopTimeoutFromEnv to see why.
func ConfigFromEnv() Config {
	address, namespace := connectionFromEnv()
	stopTimeout, _ := StopTimeoutFromEnv()
	return Config{
		TemporalAddress: address,
		Namespace:       namespace,
		DatabaseURL:     cmp.Or(os.Getenv("DATABASE_URL"), defaultDatabaseURL),
		StopTimeout:     stopTimeout,
		TaskQueue:       workflows.TaskQueue,
		MetricsAddr:     os.Getenv("AGENTSAGA_METRICS_ADDR"),
		PublicURL:       os.Getenv("AGENTSAGA_PUBLIC_URL"),
		Deployment: Deployment{
			Name: os.Getenv("AGENTSAGA_DEPLOYMENT"), BuildID: os.Getenv("AGENTSAGA_BUILD_ID"),
			Versioning: os.Getenv("AGENTSAGA_VERSIONING"),
		},
	}
}

// StopTimeoutFromEnv reads AGENTSAGA_STOP_TIMEOUT (a Go duration, such as
// 90s), 60 s when it is not set.
func StopTimeoutFromEnv() (time.Duration, error) {
	raw := os.Getenv("AGENTSAGA_STOP_TIMEOUT")
	if raw == "" {
		return defaultStopTimeout, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return defaultStopTimeout, fmt.Errorf("worker: AGENTSAGA_STOP_TIMEOUT %q: want a duration such as 60s", raw)
	}
	return d, nil
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// Options are the engine's configuration, declared once in
// agentsaga.Config, and what only a worker New builds has: a deployment
// and the SDK's own worker options. New sets Config.Temporal to the client
// it is given, and Config.LegacyNames, since such a worker may have runs
// in flight from builds before the names were namespaced. It leaves the
// reconciler's Schedule alone unless Config.ReconcileEvery is positive
// (`agentsaga worker` and `agentsaga dev` set workflows.ReconcileInterval),
// so a worker built for a test or a benchmark starts no reconciler.
type Options struct {
	agentsaga.Config
	// Deployment, when set, makes the worker one build of a worker
	// deployment; the zero value is unversioned.
	Deployment Deployment
	// Worker are the SDK's options; New adds the engine's interceptors.
	Worker sdkworker.Options
}

// New builds a Temporal worker running the agentsaga engine (the
// workflows, the activities and the retry hook, as agentsaga.Engine
// registers them), after making sure the fleet bucket's row exists; the
// caller starts and stops the worker.
func New(ctx context.Context, c client.Client, store *ledger.Store, opts Options) (sdkworker.Worker, error) {
	cfg := opts.Config
	cfg.Temporal = c
	if cfg.ReconcileEvery <= 0 {
		cfg.ReconcileEvery = -1 // the engine leaves the Schedule alone
	}
	// This worker may have runs in flight from builds that started the
	// bare workflow names and scheduled the bare activity names.
	cfg.LegacyNames = true
	engine, err := agentsaga.New(ctx, store, cfg)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	workerOptions := opts.Worker
	if opts.Deployment.versioned() {
		deployment, err := opts.Deployment.options()
		if err != nil {
			return nil, err
		}
		workerOptions.DeploymentOptions = deployment
	}
	w := sdkworker.New(c, engine.TaskQueue(), engine.WorkerOptions(workerOptions))
	engine.Register(w)
	return closesEngine{Worker: w, engine: engine}, nil
}

// closesEngine is the worker New returns: once it stopped, it closes its
// engine, so that the last success bonuses reach the bucket before the
// caller closes the store, and MCP sessions end.
type closesEngine struct {
	sdkworker.Worker
	engine *agentsaga.Engine
}

func (w closesEngine) Stop() {
	w.Worker.Stop()
	w.closeEngine()
}

func (w closesEngine) Run(interruptCh <-chan any) error {
	defer w.closeEngine()
	return w.Worker.Run(interruptCh)
}

func (w closesEngine) closeEngine() {
	if err := w.engine.Close(); err != nil {
		slog.Default().Warn("worker: close the engine", "error", err)
	}
}

// Run connects, migrates and runs a worker until ctx ends, then drains:
// it stops polling, lets the calls in flight finish for up to
// cfg.StopTimeout (the SDK cancels those still running then, and Temporal
// retries them elsewhere under the same key), and returns. With
// cfg.MetricsAddr it serves the metrics, HealthPath and ReadyPath there
// until it returns.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Deployment.validate(); err != nil {
		return err
	}
	// A profile or a key file that is wrong fails here, before the
	// database is touched.
	if _, _, err := clientOptions(cfg); err != nil {
		return err
	}
	if _, err := migrations.Apply(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	store, err := ledger.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer store.Close()
	db := ledgerdb.Of(store)
	ready := &readiness{}
	ready.setStore(db)
	defer ready.close() // before the store closes
	var observe func(agentsagatype.RetryPlan, string)
	if cfg.MetricsAddr != "" {
		m, err := newMetrics(store)
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		defer m.Close() // runs after the client closes
		addr, stopServing, err := serveStatus(ctx, cfg.MetricsAddr, statusHandler(m.Handler(), ready))
		if err != nil {
			return err
		}
		defer stopServing() // after the drain: probes answer while it lasts
		cfg.MetricsHandler, observe = m.TemporalHandler(), m.ObserveRetry
		cfg.logger().Info("agentsaga metrics", "url", "http://"+addr.String()+MetricsPath,
			"health", "http://"+addr.String()+HealthPath, "ready", "http://"+addr.String()+ReadyPath)
	}
	tp, shutdownTracing, err := tracerProviderFromEnv(ctx)
	if err != nil {
		return err
	}
	defer flushTraces(cfg.logger(), shutdownTracing) // after the worker stops
	c, err := Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ready.setTemporal(c)

	w, err := New(ctx, c, store, Options{Config: agentsaga.Config{TaskQueue: cfg.TaskQueue, Observe: observe,
		ReconcileEvery: workflows.ReconcileInterval, TracerProvider: tp}, Deployment: cfg.Deployment,
		Worker: sdkworker.Options{WorkerStopTimeout: cfg.StopTimeout}})
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("worker: start on task queue %q: %w", cfg.TaskQueue, err)
	}
	logger := cfg.logger().With("temporal", cfg.TemporalAddress, "namespace", cfg.Namespace, "task_queue", cfg.TaskQueue)
	if d := cfg.Deployment; d.versioned() {
		logger = logger.With("deployment", d.Name, "build_id", d.BuildID, "versioning", cmp.Or(d.Versioning, versioningAutoUpgrade))
	}
	logger.Info("agentsaga worker running")
	pruned, expired := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pruned)
		if cfg.Retention >= 0 {
			keepPruning(ctx, db, logger, pruneEvery, cfg.Retention)
		}
	}()
	go func() {
		defer close(expired)
		keepExpiringHolds(ctx, db, logger, expireHoldsEvery)
	}()
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		_ = deliverWebhooks(ctx, store, cfg)
	}()
	<-ctx.Done()
	ready.drain()
	logger.Info("agentsaga worker draining: no new calls; the calls in flight may finish", "stop_timeout", cfg.StopTimeout.String())
	<-pruned // before the store closes
	<-expired
	<-delivered
	w.Stop()
	logger.Info("agentsaga worker stopped")
	return nil
}
