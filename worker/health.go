package worker

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/migrations"
)

// The worker's probes, served beside MetricsPath on --metrics-addr:
// HealthPath answers 200 while the process serves at all (a liveness
// probe); ReadyPath answers 200 only while the worker is connected to
// Temporal and Postgres and the ledger's schema is the one this binary
// needs, and 503 with the reason otherwise, and from the moment it starts
// draining (a readiness probe).
const (
	HealthPath = "/healthz"
	ReadyPath  = "/readyz"
)

// readiness is what ReadyPath checks; Run fills it in as it connects.
type readiness struct {
	mu       sync.Mutex
	temporal client.Client
	store    *ledgerdb.Store
	schema   *sql.DB
	draining bool
}

func (r *readiness) setStore(store *ledgerdb.Store) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.store = store
	// The pool's own connections, through database/sql for goose; closing
	// this handle leaves the pool open.
	r.schema = stdlib.OpenDBFromPool(store.Pool())
}

func (r *readiness) setTemporal(c client.Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.temporal = c
}

func (r *readiness) drain() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.draining = true
}

func (r *readiness) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.schema != nil {
		_ = r.schema.Close()
	}
}

// check runs every check, each within the probe's deadline, and returns
// one line for each and whether all passed.
func (r *readiness) check(ctx context.Context) (lines []string, ready bool) {
	r.mu.Lock()
	temporal, store, schema, draining := r.temporal, r.store, r.schema, r.draining
	r.mu.Unlock()
	ready = true
	report := func(what string, err error) {
		if err != nil {
			ready = false
			text := strings.TrimPrefix(strings.Join(strings.Fields(err.Error()), " "), what+": ")
			lines = append(lines, what+": "+text)
			return
		}
		lines = append(lines, what+": ok")
	}
	if draining {
		report("worker", errors.New("draining: stopping after the calls in flight"))
	}
	if temporal == nil {
		report("temporal", errors.New("not connected yet"))
	} else {
		_, err := temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
		report("temporal", err)
	}
	if store == nil {
		report("postgres", errors.New("not connected yet"))
		report("migrations", errors.New("not checked: no database yet"))
	} else {
		report("postgres", store.Pool().Ping(ctx))
		report("migrations", migrations.Check(ctx, schema))
	}
	return lines, ready
}

// statusHandler serves the metrics and the two probes on one mux.
func statusHandler(metrics http.Handler, ready *readiness) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle(MetricsPath, metrics)
	}
	mux.HandleFunc(HealthPath, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc(ReadyPath, func(w http.ResponseWriter, req *http.Request) {
		// A probe's own timeout is a few seconds; a check that hangs
		// answers not ready before then.
		ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
		defer cancel()
		lines, ok := ready.check(ctx)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	})
	return mux
}

// serveStatus listens on addr and serves handler until stop is called:
// not when the run's context ends, since a draining worker still answers
// its probes and scrapes.
func serveStatus(ctx context.Context, addr string, handler http.Handler) (net.Addr, func(), error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("worker: metrics and probes: listen on %s: %w", addr, err)
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Default().Error("worker: metrics and probes server stopped", "address", ln.Addr().String(), "error", err)
		}
	}()
	stop := func() {
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdownCtx)
	}
	return ln.Addr(), stop, nil
}
