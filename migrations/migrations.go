package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Apply brings the database at databaseURL up to the newest schema and
// returns the versions it applied (none when it was already current).
func Apply(ctx context.Context, databaseURL string) ([]int64, error) {
	// pgxpool's parser takes the pool_* keys (pool_max_conns) out of the
	// URL, which the worker's pool reads; pgx's own would send them to the
	// server as settings, and the server refuses to connect.
	config, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("migrations: parse DATABASE_URL: %w", err)
	}
	db := stdlib.OpenDB(*config.ConnConfig)
	defer db.Close()
	return apply(ctx, db)
}

func apply(ctx context.Context, db *sql.DB) ([]int64, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrations: advisory lock: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrations: load: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: apply: %w", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// Check reports, changing nothing (no lock, no version table created),
// whether the database behind db has every migration this binary carries:
// nil when it has (or is newer, as while a fleet rolls forward), else an
// error naming both versions. A worker's readiness probe asks it.
func Check(ctx context.Context, db *sql.DB) error {
	provider, err := goose.NewProvider(goose.DialectPostgres, db, files)
	if err != nil {
		return fmt.Errorf("migrations: load: %w", err)
	}
	current, target, err := provider.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("migrations: read the schema's version: %w", err)
	}
	if current < target {
		return fmt.Errorf("migrations: the schema is at version %d, this binary needs %d: run `agentsaga migrate`", current, target)
	}
	return nil
}
