// Package ledgertest gives each test its own freshly migrated Postgres
// database, so tests that touch the ledger can run in parallel. It reads
// DATABASE_URL (the server to create databases on) and falls back to the
// local trust-auth server at 127.0.0.1:5432.
package ledgertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/migrations"
)

// DefaultServerURL is used when DATABASE_URL is not set.
const DefaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// ServerURL is the Postgres server tests create their databases on.
func ServerURL() string {
	if url := os.Getenv("DATABASE_URL"); url != "" {
		return url
	}
	return DefaultServerURL
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates an empty, migrated database for t, drops it when t
// ends, and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("ledgertest: connect to %s (set DATABASE_URL, or run `make postgres`): %v", ServerURL(), err)
	}
	defer admin.Close(ctx)

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	base := unsafeChars.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	name := "agentsaga_t_" + base + "_" + hex.EncodeToString(suffix)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("ledgertest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, ServerURL())
		if err != nil {
			t.Errorf("ledgertest: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("ledgertest: drop database %s: %v", name, err)
		}
	})

	u, err := url.Parse(ServerURL())
	if err != nil {
		t.Fatalf("ledgertest: DATABASE_URL must be a postgres:// URL: %v", err)
	}
	u.Path = "/" + name
	dbURL := u.String()
	if _, err := migrations.Apply(ctx, dbURL); err != nil {
		t.Fatalf("ledgertest: %v", err)
	}
	return dbURL
}

// NewStore opens a ledger on a new database for t and closes it when t ends.
func NewStore(t testing.TB) *ledger.Store {
	t.Helper()
	store, err := ledger.Open(context.Background(), NewDatabase(t))
	if err != nil {
		t.Fatalf("ledgertest: %v", err)
	}
	t.Cleanup(store.Close)
	return store
}
