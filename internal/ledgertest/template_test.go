package ledgertest

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver for database/sql

	"github.com/agentsaga/agentsaga/migrations"
)

// TestACopiedDatabaseHasEveryMigration checks that a database copied from
// the template is as current as one migrated itself.
func TestACopiedDatabaseHasEveryMigration(t *testing.T) {
	if _, ok := migrationsDigest(); !ok {
		t.Fatal("the migrations' SQL files were not found in the tree: NewDatabase would migrate every database itself")
	}
	dbURL := NewDatabase(t)
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Check(context.Background(), db); err != nil {
		t.Fatalf("a database copied from the template: %v", err)
	}
	applied, err := migrations.Apply(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Fatalf("migrating a copy of the template applied %v: the template lacked them", applied)
	}
}

// BenchmarkNewDatabase times a test's database set-up: copied from the
// template, and migrated itself as before the template.
func BenchmarkNewDatabase(b *testing.B) {
	for _, c := range []struct {
		name         string
		fromTemplate bool
	}{{"template", true}, {"migrate", false}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				newDatabase(b, c.fromTemplate)
			}
		})
	}
}
