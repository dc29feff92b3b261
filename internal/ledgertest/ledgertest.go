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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
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

// MaxConns is the most connections a pool the helpers open holds (NewStore,
// NewCountingStore, a pool on NewPooledDatabase's URL), where ledgerdb.Open's
// default for a worker is ledgerdb.DefaultMaxConns (32). `go test ./...` runs
// GOMAXPROCS packages at once and, in each, GOMAXPROCS parallel tests: with
// 32 a pool, one test's 4 pools of 16 goroutines each held 64 connections,
// and beside another program's 20 Postgres refused a client (too many
// clients already; max_connections is 100). A test that opens several
// pools on one database gives each a share of MaxConns (WithMaxConns), so
// a test holds about MaxConns connections at most, and the suite on a
// 2-core machine stays under 50 (scripts/pgpeak.sh measures it).
const MaxConns = 8

// NewDatabase creates an empty, migrated database for t, drops it when t
// ends, and returns its URL. It copies a template migrated once per schema
// (migratedTemplate), where applying the 33 migrations to each of the
// suite's few hundred databases took most of their set-up.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabase(t, true)
}

// newDatabase is NewDatabase, copying the template or, without one,
// migrating the new database itself.
func newDatabase(t testing.TB, fromTemplate bool) string {
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
	template := ""
	if fromTemplate {
		if template, err = migratedTemplate(ctx, admin); err != nil {
			t.Fatalf("ledgertest: %v", err)
		}
	}
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		create += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := admin.Exec(ctx, create); err != nil {
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
	if template == "" {
		if _, err := migrations.Apply(ctx, dbURL); err != nil {
			t.Fatalf("ledgertest: %v", err)
		}
	}
	return dbURL
}

// NewPooledDatabase is NewDatabase whose URL caps a pgx pool opened on it
// (ledgerdb.Open, pgxpool.New, a worker process given it as DATABASE_URL) at
// MaxConns connections, unless DATABASE_URL sets pool_max_conns itself.
// Only pgxpool reads pool_max_conns: pgx.Connect, psql and pgbench send it
// to the server, which refuses to connect, so they take NewDatabase's URL.
func NewPooledDatabase(t testing.TB) string {
	t.Helper()
	dbURL := NewDatabase(t)
	if u, err := url.Parse(dbURL); err == nil && u.Query().Has("pool_max_conns") {
		return dbURL
	}
	return WithMaxConns(dbURL, MaxConns)
}

// WithMaxConns returns databaseURL with pool_max_conns set to n: it
// replaces the URL's own, where appending a second would leave which one
// counts to the parser.
func WithMaxConns(databaseURL string, n int) string {
	u, err := url.Parse(databaseURL)
	if err != nil {
		panic("ledgertest: WithMaxConns: " + err.Error())
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(n))
	u.RawQuery = q.Encode()
	return u.String()
}

// NewStore opens a ledger (a pool of MaxConns connections at most) on a new
// database for t and closes it when t ends.
func NewStore(t testing.TB) *ledgerdb.Store {
	t.Helper()
	return ledgerdb.Of(NewHandle(t))
}

// NewHandle is NewStore as the public handle a team holds, for
// agentsaga.New, worker.New and StartOptions.Ledger; ledgerdb.Of is the
// store behind it.
func NewHandle(t testing.TB) *ledger.Store {
	t.Helper()
	store, err := ledger.Open(context.Background(), NewPooledDatabase(t))
	if err != nil {
		t.Fatalf("ledgertest: %v", err)
	}
	t.Cleanup(store.Close)
	return store
}
