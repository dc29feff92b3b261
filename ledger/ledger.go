package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is a handle on the ledger, backed by a pgx connection pool, to give
// agentsaga.New, StartOptions.Ledger and Run.WithLedger. It is safe for
// concurrent use.
type Store struct {
	// machinery is the store the engine's rooms work on, reached through
	// the handle (ledgerdb.Of); none of its methods is the handle's.
	machinery
}

type machinery = ledgerdb.Handle

func wrap(store *ledgerdb.Store) *Store { return &Store{ledgerdb.NewHandle(store)} }

// db is the store behind the handle.
func (s *Store) db() *ledgerdb.Store { return ledgerdb.Of(s) }

// Open connects to databaseURL and checks that Postgres answers. An
// unreachable server gets an error that names its address. Unless the URL
// sets pool_max_conns, the pool holds up to 32 connections: enough for a
// worker's concurrent calls; size the sum across a fleet's workers below
// Postgres' max_connections.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	store, err := ledgerdb.Open(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	return wrap(store), nil
}

// New makes a store on a pool the caller already has (its own settings,
// tracer, or one pool for its own tables and the ledger's). Close on the
// store closes the pool; a caller that shares the pool closes it itself
// and never calls Close.
func New(pool *pgxpool.Pool) (*Store, error) {
	store, err := ledgerdb.New(pool)
	if err != nil {
		return nil, err
	}
	return wrap(store), nil
}

// Close releases the pool.
func (s *Store) Close() { s.db().Close() }

// EnsureDatabase creates the database databaseURL names when the server is
// up but the database is not there yet, as on a fresh machine. The schema
// is package migrations' to apply.
func EnsureDatabase(ctx context.Context, databaseURL string) error {
	// pgxpool's parser takes the pool_* keys (pool_max_conns) out of the
	// URL; pgx's own would send them to the server, which refuses them.
	poolConfig, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("ledger: parse DATABASE_URL: %w", err)
	}
	config := poolConfig.ConnConfig
	address := ledgerdb.Address(config.Host, config.Port)
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

// SpendCap is an operator's cap on what an account may spend in a period:
// Account (a path, "acme/support", whose calls are charged to its parents'
// caps too), Period (SpendMinute, SpendHour, SpendDay or SpendMonth,
// calendar-aligned in TimeZone, or a RollingPeriod), USD, OnExhausted
// (agentsagatype.OnExhaustedFinish, the default, OnExhaustedWait or
// OnExhaustedEscalate) and FinishReserve (the share of the cap only
// finishing turns may use). Its Validate says what is wrong with it.
type SpendCap = ledgerdb.SpendCap

// SpendCapState is a cap with its current period: what is spent in it and
// reserved, when it resets, the runs waiting on it and its refusals; Left
// is the room it has.
type SpendCapState = ledgerdb.SpendCapState

// A cap's calendar periods, aligned in the cap's time zone.
const (
	SpendMinute = ledgerdb.SpendMinute
	SpendHour   = ledgerdb.SpendHour
	SpendDay    = ledgerdb.SpendDay
	SpendMonth  = ledgerdb.SpendMonth
)

// RollingPeriod is the period of a cap on what an account spends in any
// window of d ("rolling:24h").
func RollingPeriod(d time.Duration) string { return ledgerdb.RollingPeriod(d) }

// SetSpendCap sets an account's cap for a period, replacing the one it had,
// and records who changed it (by), when, from what and to what. It returns
// the cap as it was (nil when there was none).
func (s *Store) SetSpendCap(ctx context.Context, c SpendCap, by string) (*SpendCap, error) {
	return s.db().SetSpendCap(ctx, c, by)
}

// RemoveSpendCap removes an account's cap for a period, recording who did
// it (by); it returns the cap removed (nil when there was none).
func (s *Store) RemoveSpendCap(ctx context.Context, account, period, by string) (*SpendCap, error) {
	return s.db().RemoveSpendCap(ctx, account, period, by)
}

// SpendCaps lists the caps of account and every account under it (all caps
// when account is empty), each with its current period.
func (s *Store) SpendCaps(ctx context.Context, account string) ([]SpendCapState, error) {
	return s.db().SpendCaps(ctx, account)
}

// PruneOptions say what Prune deletes: the runs that finished before
// RunsFinishedBefore, with all their rows (runs still running, escalated or
// needing attention are kept however old), the retry charges recorded
// before ChargesBefore, Batch rows per delete. Zero fields take the
// defaults: 30 days, 24 hours, 500.
type PruneOptions = ledgerdb.PruneOptions

// PruneReport counts what a prune deleted.
type PruneReport = ledgerdb.PruneReport

// ErrPruneBusy is what Prune returns when another pruner holds the lock.
var ErrPruneBusy = ledgerdb.ErrPruneBusy

// Prune deletes what the ledger no longer needs, in bounded batches, under
// an advisory lock so that one pruner in the fleet works at a time (a
// second gets ErrPruneBusy). It stops early, with what it did so far, when
// ctx ends. The CLI's worker prunes hourly; a team that runs the engine on
// its own worker calls it on a schedule of its own.
func (s *Store) Prune(ctx context.Context, opts PruneOptions) (PruneReport, error) {
	return s.db().Prune(ctx, opts)
}
