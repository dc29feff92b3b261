package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentsaga/agentsaga/internal/coalesce"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// EnsureDatabase creates the database databaseURL names when the server is
// up but the database is not there yet, as on a fresh machine.
func EnsureDatabase(ctx context.Context, databaseURL string) error {
	// pgxpool's parser takes the pool_* keys (pool_max_conns) out of the
	// URL; pgx's own would send them to the server, which refuses them.
	poolConfig, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("ledger: parse DATABASE_URL: %w", err)
	}
	config := poolConfig.ConnConfig
	address := Address(config.Host, config.Port)
	conn, err := pgx.ConnectConfig(ctx, config)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("ledger: postgres at %s is unreachable: %w", address, err)
	}
	admin := config.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("ledger: create database %q on %s: %w", config.Database, address, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{config.Database}.Sanitize()); err != nil {
		if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: another process won
			return nil
		}
		return fmt.Errorf("ledger: create database %q on %s: %w", config.Database, address, err)
	}
	return nil
}
