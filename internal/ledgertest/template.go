package ledgertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/agentsaga/agentsaga/migrations"
)

// templateLock is the advisory lock under which one process builds the
// template; the others wait on it and then find the template built.
const templateLock = 7_310_046_001

// template is this process's template database, found or built once.
var template struct {
	once sync.Once
	name string
	err  error
}

// migratedTemplate returns the name of a database holding the schema of
// this tree's migrations, for CREATE DATABASE ... TEMPLATE: a copy is a
// file copy, where applying every migration to each test's database took
// a second or more of the test. The name carries a digest of the SQL
// files, so an edited or added migration gets a template of its own, and
// test binaries of other checkouts on the same server keep theirs. It
// returns "" when the migrations' sources cannot be found (a binary run
// away from its tree): NewDatabase then migrates each database itself.
func migratedTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	template.once.Do(func() {
		template.name, template.err = ensureTemplate(ctx, admin)
	})
	return template.name, template.err
}

func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	digest, ok := migrationsDigest()
	if !ok {
		return "", nil
	}
	name := "agentsaga_template_" + digest[:16]
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLock); err != nil {
		return "", fmt.Errorf("template %s: lock: %w", name, err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLock) //nolint:errcheck // closing the connection releases it too
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("template %s: look up: %w", name, err)
	}
	if exists {
		return name, nil
	}
	// Built under another name and renamed when whole, so a process
	// killed while migrating leaves no half-built template behind the
	// name the others copy.
	building := name + "_building"
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("template %s: drop a half-built one: %w", name, err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", fmt.Errorf("template %s: create: %w", name, err)
	}
	u, err := url.Parse(ServerURL())
	if err != nil {
		return "", fmt.Errorf("template %s: DATABASE_URL must be a postgres:// URL: %w", name, err)
	}
	u.Path = "/" + building
	if _, err := migrations.Apply(ctx, u.String()); err != nil {
		return "", fmt.Errorf("template %s: %w", name, err)
	}
	// No connections from now on: a copy needs its template to have none.
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("template %s: rename: %w", name, err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", fmt.Errorf("template %s: mark: %w", name, err)
	}
	return name, nil
}

// migrationsDigest is the SHA-256 of the migrations' SQL files in the tree
// (their names and contents), and false when they cannot be found.
func migrationsDigest() (string, bool) {
	dir, ok := migrationsDir()
	if !ok {
		return "", false
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil || len(names) == 0 {
		return "", false
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		body, err := os.ReadFile(n)
		if err != nil {
			return "", false
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(n), len(body))
		h.Write(body)
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// libraryModule is the first line of the library's go.mod.
const libraryModule = "module github.com/agentsaga/agentsaga\n"

// migrationsDir finds the tree's migrations/: beside this source file when
// the binary knows where that is, else in the library's module above the
// working directory. make test builds with -trimpath (so that a clone in
// another directory reuses the build cache), which leaves runtime.Caller
// a path relative to the module, but go test runs each test binary in its
// package's directory, inside the tree.
func migrationsDir() (string, bool) {
	if _, self, _, ok := runtime.Caller(0); ok && filepath.IsAbs(self) {
		return filepath.Join(filepath.Dir(self), "..", "..", "migrations"), true
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(mod), libraryModule) {
			return filepath.Join(dir, "migrations"), true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
