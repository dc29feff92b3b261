package ledgerdb

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentsaga/agentsaga/internal/coalesce"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrNotFound is returned when a run or action does not exist.
var ErrNotFound = errors.New("not found")

// Store is the ledger, backed by a pgx connection pool. It is safe for
// concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// calls sends the claims and completions of concurrent calls together.
	calls *coalesce.Coalescer
}

// Open connects to databaseURL and checks that Postgres answers. An
// unreachable server gets an error that names its address.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	config, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("ledger: parse DATABASE_URL: %w", err)
	}
	if !strings.Contains(databaseURL, "pool_max_conns") {
		// pgxpool's own default, max(4, CPUs), is one statement at a time
		// for a few calls: a worker runs many calls at once, each renewing
		// its lease every few seconds, and a renewal that waits for a
		// connection can lose the lease.
		config.MaxConns = DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return nil, fmt.Errorf("ledger: connect to postgres at %s: %w", Address(config.ConnConfig.Host, config.ConnConfig.Port), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ledger: postgres at %s (database %q) is unreachable: %w",
			Address(config.ConnConfig.Host, config.ConnConfig.Port), config.ConnConfig.Database, err)
	}
	return &Store{pool: pool, calls: coalesce.New(pool)}, nil
}

// New makes a store on a pool the caller already has (its own settings,
// tracer, or one pool for its own tables and the ledger's). Close on the
// store closes the pool; a caller that shares the pool closes it itself
// and never calls Close.
func New(pool *pgxpool.Pool) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("ledger: the pool is nil")
	}
	return &Store{pool: pool, calls: coalesce.New(pool)}, nil
}

// DefaultMaxConns is the pool size Open uses when DATABASE_URL sets no
// pool_max_conns (which pgxpool reads, as it reads pool_min_conns and the
// rest): enough for a worker's concurrent calls, each of which holds a
// connection only for one short statement at a time. Size the sum across
// a fleet's workers below Postgres' max_connections.
const DefaultMaxConns = 32

// Address formats a Postgres host and port for error messages.
func Address(host string, port uint16) string {
	return fmt.Sprintf("%s:%d", host, port)
}

// Close releases the pool.
func (s *Store) Close() { s.pool.Close() }

// Pool exposes the underlying pool for tests and operator queries.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Handle is what the public ledger.Store embeds: the store behind the
// handle, which the rooms reach with Of and a user never sees, since
// Handle has no exported method or field.
type Handle struct{ store *Store }

// NewHandle holds store, for ledger.Store to embed.
func NewHandle(store *Store) Handle { return Handle{store: store} }

// ledgerStore is promoted to the ledger.Store that embeds h, which makes
// that handle a handle (the interface below), and only this package can
// name it.
func (h Handle) ledgerStore() *Store { return h.store }

// handle is the public ledger.Store, seen from here without importing it.
type handle interface{ ledgerStore() *Store }

// Of is the store behind a public ledger handle (a *ledger.Store): how the
// root package, the worker, the CLI and the test kit reach the machinery a
// team is not given. The handle must not be nil.
func Of(h handle) *Store { return h.ledgerStore() }
