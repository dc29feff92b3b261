package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/agentsaga/agentsaga/internal/ledgertest"
	"github.com/agentsaga/agentsaga/migrations"
)

// Check passes on a migrated database and names the versions once the
// newest migration is missing, without applying anything.
func TestCheckReportsAMissingMigration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := migratedDatabase(t)
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
	err := migrations.Check(ctx, db)
	if err == nil || !strings.Contains(err.Error(), "agentsaga migrate") {
		t.Fatalf("one migration short: got %v, want an error that says to migrate", err)
	}
	if err := migrations.Check(ctx, db); err == nil {
		t.Fatal("Check applied the missing migration; it must change nothing")
	}
}

// Every migration's Down undoes its Up far enough for the Up to run again:
// a database migrated all the way down, then up, comes out migrated.
func TestMigrationsGoDownAndUpAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := migratedDatabase(t)
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

// migratedDatabase is a database of the test's own with every migration
// applied, closed when the test ends.
func migratedDatabase(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", ledgertest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

var _ = stdlib.GetDefaultDriver // registers the pgx driver for sql.Open

// No migration restates a function as it already stands. A migration that
// changes a function replaces that function alone (CREATE OR REPLACE, or a
// new overload), not its unchanged neighbours; a Down restates only what
// its Up changed, to restore it. Databases in the field have run these
// files and goose keeps no checksums, so editing an applied migration's
// text changes nothing there: a fresh database must come out the same.
func TestMigrationsRestateOnlyWhatTheyChange(t *testing.T) {
	problems, definitions, err := restatements(migrations.Files)
	if err != nil {
		t.Fatal(err)
	}
	if definitions < 80 {
		t.Fatalf("read %d function definitions in the migrations, want the 89 or more they hold: the parser has lost them", definitions)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The check above finds what it is for: an Up that restates a function
// unchanged but for white space and comments, and a Down that restates a
// function its Up did not change; and it passes a real change, a new
// overload, and a Down that restores what its Up replaced or dropped.
func TestRestatementsFindsAnUnchangedFunction(t *testing.T) {
	fn := func(create, name, params, body string) string {
		return "-- +goose StatementBegin\n" + create + " FUNCTION " + name + "(" + params + ")\n" +
			"RETURNS integer LANGUAGE plpgsql AS $$\nBEGIN\n    " + body + "\nEND\n$$;\n-- +goose StatementEnd\n"
	}
	fsys := fstest.MapFS{
		"00001_a.sql": {Data: []byte("-- +goose Up\nCREATE TABLE t (x int);\n" +
			fn("CREATE", "f", "p_x integer", "RETURN p_x;") + fn("CREATE", "g", "p_x integer", "RETURN 1;") +
			fn("CREATE", "h", "p_x integer", "RETURN 2;") +
			"-- +goose Down\nDROP FUNCTION h(integer);\nDROP FUNCTION g(integer);\nDROP FUNCTION f(integer);\nDROP TABLE t;\n")},
		"00002_b.sql": {Data: []byte("-- +goose Up\n" +
			fn("CREATE OR REPLACE", "f", "p_x  integer", "RETURN p_x + 1;") +
			fn("CREATE OR REPLACE", "g", "p_x integer", "-- the same as 00001's\n    RETURN   1;") +
			fn("CREATE", "h", "p_x integer, p_y integer", "RETURN 2;") +
			"-- +goose Down\nDROP FUNCTION h(integer, integer);\n" + fn("CREATE OR REPLACE", "f", "p_x integer", "RETURN p_x;"))},
		"00010_c.sql": {Data: []byte("-- +goose Up\nDROP FUNCTION h(integer, integer);\n" +
			"-- +goose Down\n" + fn("CREATE", "h", "p_x integer, p_y integer", "RETURN 2;") +
			fn("CREATE OR REPLACE", "f", "p_x integer", "RETURN p_x + 1;") +
			fn("CREATE OR REPLACE", "g", "p_x integer", "RETURN 3;"))},
	}
	problems, _, err := restatements(fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"00002_b.sql:", "restates g(p_x integer) unchanged",
		"00010_c.sql:", "Down restates f(p_x integer), which its Up did not change",
		"00010_c.sql:", "Down restates g(p_x integer), which its Up did not change",
	}
	if len(problems) != len(want)/2 {
		t.Fatalf("got %d problems, want %d:\n%s", len(problems), len(want)/2, strings.Join(problems, "\n"))
	}
	for i, p := range problems {
		if !strings.HasPrefix(p, want[2*i]) || !strings.Contains(p, want[2*i+1]) {
			t.Errorf("problem %d: got %q, want %s…%s", i, p, want[2*i], want[2*i+1])
		}
	}
}

// restatements reads the goose files in fsys in version order and names
// every CREATE [OR REPLACE] FUNCTION (or PROCEDURE, or VIEW) that restates
// one whose definition, white space and comments aside, is already the
// current one; and every one in a Down section for a name its Up did not
// create, replace or drop, or that restates it as its Up left it.
// Overloads are told apart by their parameter lists. A DROP in an Up
// forgets every overload of its name (its argument types are not matched
// against parameter lists), which can only hide a restatement, not make
// one up. definitions counts the CREATE statements it read.
func restatements(fsys fs.FS) (problems []string, definitions int, err error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, 0, err
	}
	version := func(name string) int64 {
		v, _ := strconv.ParseInt(name[:strings.IndexFunc(name+"_", func(r rune) bool { return r < '0' || r > '9' })], 10, 64)
		return v
	}
	sort.Slice(names, func(i, j int) bool { return version(names[i]) < version(names[j]) })

	current := map[string]string{} // key → normalised text, as the Ups left it
	for _, file := range names {
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, 0, err
		}
		touched := map[string]bool{} // names the Up creates, replaces or drops
		for _, s := range gooseStatements(string(data)) {
			where := fmt.Sprintf("%s:%d", file, s.line)
			if m := sqlDrop.FindStringSubmatch(s.text); m != nil && !s.down {
				name := strings.ToLower(m[1])
				touched[name] = true
				for key := range current {
					if strings.HasPrefix(key, name+"(") || key == name {
						delete(current, key)
					}
				}
				continue
			}
			m := sqlCreate.FindStringSubmatchIndex(s.text)
			if m == nil {
				continue
			}
			definitions++
			name := strings.ToLower(s.text[m[4]:m[5]])
			key := name
			if !strings.EqualFold(s.text[m[2]:m[3]], "VIEW") {
				key += "(" + parameters(s.text[m[1]:]) + ")"
			}
			text := normaliseSQL(s.text[m[1]:])
			if !s.down {
				if was, ok := current[key]; ok && was == text {
					problems = append(problems, fmt.Sprintf("%s: restates %s unchanged; leave it out", where, key))
				}
				current[key] = text
				touched[name] = true
				continue
			}
			if _, ok := current[key]; !ok {
				continue // a Down may create what its Up dropped
			}
			if !touched[name] {
				problems = append(problems, fmt.Sprintf("%s: the Down restates %s, which its Up did not change; leave it out", where, key))
			} else if current[key] == text {
				problems = append(problems, fmt.Sprintf("%s: the Down restates %s as its Up left it; leave it out", where, key))
			}
		}
	}
	return problems, definitions, nil
}

var (
	sqlCreate = regexp.MustCompile(`(?is)^\s*CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE|VIEW)\s+([\w.]+)`)
	sqlDrop   = regexp.MustCompile(`(?is)^\s*DROP\s+(?:FUNCTION|PROCEDURE|VIEW)\s+(?:IF\s+EXISTS\s+)?([\w.]+)`)
	sqlSpace  = regexp.MustCompile(`\s+`)
)

type gooseStatement struct {
	line int
	down bool
	text string // from the statement's first line that is not a comment
}

// gooseStatements splits a goose SQL file as goose does: a statement ends
// at a line ending in a semicolon, or at -- +goose StatementEnd after a
// StatementBegin. Comment lines before a statement are left out.
func gooseStatements(file string) []gooseStatement {
	var out []gooseStatement
	var buf []string
	down, block, start := false, false, 0
	flush := func() {
		if text := strings.Join(buf, "\n"); strings.TrimSpace(text) != "" {
			out = append(out, gooseStatement{line: start, down: down, text: text})
		}
		buf = nil
	}
	for i, line := range strings.Split(file, "\n") {
		trimmed := strings.TrimSpace(line)
		if annotation, ok := strings.CutPrefix(trimmed, "-- +goose "); ok {
			flush()
			word, _, _ := strings.Cut(strings.TrimSpace(annotation), " ")
			switch word {
			case "Up", "Down":
				down = word == "Down"
			case "StatementBegin", "StatementEnd":
				block = word == "StatementBegin"
			}
			continue
		}
		if len(buf) == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		if len(buf) == 0 {
			start = i + 1
		}
		buf = append(buf, line)
		if !block && strings.HasSuffix(strings.TrimSpace(stripComment(line)), ";") {
			flush()
		}
	}
	flush()
	return out
}

// parameters is the parameter list that follows a function's name,
// normalised; rest starts just after the name.
func parameters(rest string) string {
	open := strings.Index(rest, "(")
	if open < 0 || strings.TrimSpace(rest[:open]) != "" {
		return ""
	}
	depth := 0
	for i := open; i < len(rest); i++ {
		switch rest[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return strings.ToLower(normaliseSQL(rest[open+1 : i]))
			}
		}
	}
	return ""
}

// normaliseSQL drops -- comments and folds white space.
func normaliseSQL(text string) string {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		lines[i] = stripComment(line)
	}
	return strings.TrimSpace(sqlSpace.ReplaceAllString(strings.Join(lines, "\n"), " "))
}

func stripComment(line string) string {
	if i := strings.Index(line, "--"); i >= 0 {
		return line[:i]
	}
	return line
}
