package migrations_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/migrations"
)

// Every migration's Down undoes its Up far enough for the Up to run again:
// a database migrated all the way down, then up, comes out migrated.
func TestMigrationsGoDownAndUpAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", ledgertest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Files)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := provider.DownTo(ctx, 0); err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	var left []string
	rows, err := db.QueryContext(ctx, `
		SELECT 'table ' || tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version'
		UNION ALL SELECT 'function ' || proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
		UNION ALL SELECT 'type ' || typname FROM pg_type WHERE typnamespace = 'public'::regnamespace AND typtype IN ('e', 'd')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		left = append(left, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("migrated down to 0, the schema still holds %v", left)
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("up again after down to 0: %v", err)
	}
	if err := migrations.Check(ctx, db); err != nil {
		t.Fatalf("after down and up: %v", err)
	}
}
