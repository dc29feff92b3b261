package migrations_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/migrations"
)

// Check passes on a migrated database and names the versions once the
// newest migration is missing, without applying anything.
func TestCheckReportsAMissingMigration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", ledgertest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Check(ctx, db); err != nil {
		t.Fatalf("a migrated database: %v", err)
	}
	var newest int64
	if err := db.QueryRowContext(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&newest); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, newest); err != nil {
		t.Fatal(err)
	}
	err = migrations.Check(ctx, db)
	if err == nil || !strings.Contains(err.Error(), "agentsaga migrate") {
		t.Fatalf("one migration short: got %v, want an error that says to migrate", err)
	}
	if err := migrations.Check(ctx, db); err == nil {
		t.Fatal("Check applied the missing migration; it must change nothing")
	}
}

var _ = stdlib.GetDefaultDriver // registers the pgx driver for sql.Open
