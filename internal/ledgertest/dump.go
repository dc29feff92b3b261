package ledgertest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// Tables lists the base tables of the store's database (migrations'
// bookkeeping included), so a test that checks "the ledger is unchanged"
// also covers tables added after it was written.
func Tables(t testing.TB, store *ledgerdb.Store) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := store.Pool().Query(ctx, `
		SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		t.Fatalf("ledgertest: list tables: %v", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("ledgertest: list tables: %v", err)
	}
	return names
}

// Counts returns the number of rows in every table, by table name.
func Counts(t testing.TB, store *ledgerdb.Store) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts := map[string]int64{}
	for _, table := range Tables(t, store) {
		var n int64
		// A table name cannot be a query parameter; it comes from the
		// catalogue and is quoted as an identifier.
		if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
			t.Fatalf("ledgertest: count rows of %s: %v", table, err)
		}
		counts[table] = n
	}
	return counts
}

// Dump returns every row of every table as JSON text (row_to_json), keyed
// by table name: every text column of the ledger, for tests that look for
// a string that must not be there.
func Dump(t testing.TB, store *ledgerdb.Store) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dump := map[string][]string{}
	for _, table := range Tables(t, store) {
		rows, err := store.Pool().Query(ctx, `SELECT row_to_json(t)::text FROM `+pgx.Identifier{table}.Sanitize()+` t`)
		if err != nil {
			t.Fatalf("ledgertest: dump %s: %v", table, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("ledgertest: dump %s: %v", table, err)
		}
		dump[table] = lines
	}
	return dump
}
