// Package worker wires agentsaga together: it connects to Temporal and
// Postgres (naming the address when either is unreachable), applies the
// migrations, registers the AgentRun workflow and the activities with the
// built-in Go tools, and runs until its context ends.
package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/migrations"
	"github.com/agentsaga/agentsaga/workflows"
)

// Defaults for a local dev server and Postgres.
const (
	DefaultTemporalAddress = "127.0.0.1:7233"
	DefaultNamespace       = "default"
	DefaultDatabaseURL     = "postgres://postgres@127.0.0.1:5432/agentsaga?sslmode=disable"
)

// Config says where the worker's Temporal and Postgres are.
type Config struct {
	TemporalAddress string
	Namespace       string
	DatabaseURL     string
	TaskQueue       string
	Logger          *slog.Logger
}

// ConfigFromEnv reads TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and DATABASE_URL,
// with local defaults for those not set.
func ConfigFromEnv() Config {
	get := func(name, fallback string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return fallback
	}
	return Config{
		TemporalAddress: get("TEMPORAL_ADDRESS", DefaultTemporalAddress),
		Namespace:       get("TEMPORAL_NAMESPACE", DefaultNamespace),
		DatabaseURL:     get("DATABASE_URL", DefaultDatabaseURL),
		TaskQueue:       workflows.TaskQueue,
	}
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// Dial connects to Temporal and checks that it answers within ten seconds.
func Dial(ctx context.Context, cfg Config) (client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  cfg.TemporalAddress,
		Namespace: cfg.Namespace,
		Logger:    log.NewStructuredLogger(cfg.logger()),
	})
	if err != nil {
		return nil, fmt.Errorf("worker: temporal at %s (namespace %q) is unreachable: %w", cfg.TemporalAddress, cfg.Namespace, err)
	}
	return c, nil
}

// Options are what New registers beyond the defaults.
type Options struct {
	TaskQueue string
	// Toolbox holds the Go tools; nil means Builtins().
	Toolbox *activities.Toolbox
	// HTTPClient carries HTTP tools and model calls; nil means a client
	// with no retries of its own.
	HTTPClient *http.Client
	Worker     sdkworker.Options
}

// New registers the workflow and activities on a Temporal worker; the caller
// starts and stops it.
func New(c client.Client, store *ledger.Store, opts Options) sdkworker.Worker {
	queue := opts.TaskQueue
	if queue == "" {
		queue = workflows.TaskQueue
	}
	toolbox := opts.Toolbox
	if toolbox == nil {
		toolbox = Builtins()
	}
	httpClient := opts.HTTPClient
	if httpClient == nil {
		httpClient = &http.Client{Timeout: 5 * time.Minute}
	}
	w := sdkworker.New(c, queue, opts.Worker)
	w.RegisterWorkflow(workflows.AgentRun)
	w.RegisterActivity(&activities.Activities{Ledger: store, Toolbox: toolbox, HTTPClient: httpClient})
	return w
}

// Run connects, migrates and runs a worker until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if _, err := migrations.Apply(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	store, err := ledger.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer store.Close()
	c, err := Dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()

	w := New(c, store, Options{TaskQueue: cfg.TaskQueue})
	if err := w.Start(); err != nil {
		return fmt.Errorf("worker: start on task queue %q: %w", cfg.TaskQueue, err)
	}
	cfg.logger().Info("agentsaga worker running", "temporal", cfg.TemporalAddress, "namespace", cfg.Namespace, "task_queue", cfg.TaskQueue)
	<-ctx.Done()
	w.Stop()
	return nil
}
