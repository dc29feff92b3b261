package agentsaga_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ARCHITECTURE.md's rooms table says, for every package of the module,
// which of the module's packages it imports and which import it. This
// test compares the table with what `go list` says today, so the map
// cannot go stale: a new import, a new package or a package removed
// fails it until the table says so too.
func TestArchitectureRoomsMatchImports(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	table, err := parseRoomsTable(string(doc))
	if err != nil {
		t.Fatalf("ARCHITECTURE.md: %v", err)
	}
	real, err := moduleImports()
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	for _, room := range sortedKeys(real) {
		row, ok := table[room]
		if !ok {
			problems = append(problems, fmt.Sprintf("package %s has no row; it imports %s and is imported by %s",
				room, list(real[room].imports), list(real[room].importedBy)))
			continue
		}
		if !slices.Equal(row.imports, real[room].imports) {
			problems = append(problems, fmt.Sprintf("%s: the table says it imports %s; it imports %s",
				room, list(row.imports), list(real[room].imports)))
		}
		if !slices.Equal(row.importedBy, real[room].importedBy) {
			problems = append(problems, fmt.Sprintf("%s: the table says it is imported by %s; it is imported by %s",
				room, list(row.importedBy), list(real[room].importedBy)))
		}
	}
	for _, room := range sortedKeys(table) {
		if _, ok := real[room]; !ok {
			problems = append(problems, fmt.Sprintf("%s has a row but is no package of the module", room))
		}
	}
	if len(problems) > 0 {
		t.Errorf("ARCHITECTURE.md's rooms table does not match `go list -json ./...`:\n  %s", strings.Join(problems, "\n  "))
	}
}

// The parser reads what the table says, and a wrong row is caught.
func TestArchitectureTableParses(t *testing.T) {
	t.Parallel()
	doc := "# A\n\n## Rooms\n\n" +
		"| room | imports | imported by | what it owns |\n| --- | --- | --- | --- |\n" +
		"| `agentsaga` (root) | `budget`, `ledger` | - | the facade, which imports `workflows` |\n" +
		"| `budget` | - | `agentsaga` | arithmetic |\n\n## Next\n\n| room | imports | imported by |\n"
	table, err := parseRoomsTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got := table["agentsaga"].imports; !slices.Equal(got, []string{"budget", "ledger"}) {
		t.Errorf("root imports %v", got)
	}
	if got := table["budget"].importedBy; !slices.Equal(got, []string{"agentsaga"}) {
		t.Errorf("budget imported by %v", got)
	}
	if len(table) != 2 {
		t.Errorf("%d rows, want 2: a table after the section is not the rooms table", len(table))
	}
	if _, err := parseRoomsTable("## Rooms\n\n| room | owns |\n| --- | --- |\n| `a` | b |\n"); err == nil {
		t.Error("a table without imports columns parsed")
	}
}

type room struct{ imports, importedBy []string }

var backticked = regexp.MustCompile("`([^`]+)`")

// parseRoomsTable reads the first table of the "## Rooms" section: one row
// per package, named by its path in the module in backticks (the root
// package as `agentsaga`), with columns "imports" and "imported by" that
// list the module's packages in backticks, or "-" for none.
func parseRoomsTable(doc string) (map[string]room, error) {
	_, section, ok := strings.Cut(doc, "\n## Rooms\n")
	if !ok {
		return nil, errors.New(`no "## Rooms" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var header []string
	rooms := map[string]room{}
	inTable := false
	for line := range strings.Lines(section) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case !inTable:
			inTable, header = true, cells
		case strings.HasPrefix(cells[0], "---"):
		default:
			if len(cells) != len(header) {
				return nil, fmt.Errorf("rooms table row %q has %d cells, the header %d", line, len(cells), len(header))
			}
			names := backticked.FindStringSubmatch(cells[0])
			if names == nil {
				return nil, fmt.Errorf("rooms table row %q names no package in backticks", line)
			}
			r := room{}
			for i, h := range header {
				switch h {
				case "imports":
					r.imports = packageList(cells[i])
				case "imported by":
					r.importedBy = packageList(cells[i])
				}
			}
			if _, dup := rooms[names[1]]; dup {
				return nil, fmt.Errorf("rooms table has two rows for %s", names[1])
			}
			rooms[names[1]] = r
		}
	}
	if !slices.Contains(header, "imports") || !slices.Contains(header, "imported by") {
		return nil, fmt.Errorf(`the rooms table's header %q lacks the "imports" and "imported by" columns`, header)
	}
	return rooms, nil
}

func packageList(cell string) []string {
	var names []string
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return names
}

// moduleImports is, for every non-test package of the module, the
// module's packages it imports (its Imports field, test files left out)
// and those that import it, named as the table names them.
func moduleImports() (map[string]room, error) {
	type pkg struct {
		ImportPath string
		Imports    []string
		Module     *struct{ Path string }
	}
	var pkgs []pkg
	// The library's module, then the CLI's (cmd/agentsaga, with the
	// benchmarks), which has a go.mod of its own.
	for _, dir := range []string{".", "cmd/agentsaga"} {
		cmd := exec.Command("go", "list", "-json", "./...")
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list -json ./... in %s: %v: %s", dir, err, stderr.String())
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p pkg
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("go list -json ./... in %s: %w", dir, err)
			}
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) == 0 || pkgs[0].Module == nil {
		return nil, errors.New("go list -json ./... listed no package of a module")
	}
	module := pkgs[0].Module.Path
	name := func(path string) (string, bool) {
		if path == module {
			return "agentsaga", true
		}
		rel, ok := strings.CutPrefix(path, module+"/")
		return rel, ok
	}
	rooms := map[string]room{}
	for _, p := range pkgs {
		from, _ := name(p.ImportPath)
		r := rooms[from]
		for _, imp := range p.Imports {
			if to, ours := name(imp); ours {
				r.imports = append(r.imports, to)
				back := rooms[to]
				back.importedBy = append(back.importedBy, from)
				rooms[to] = back
			}
		}
		rooms[from] = r
	}
	for k, r := range rooms {
		slices.Sort(r.imports)
		slices.Sort(r.importedBy)
		rooms[k] = r
	}
	return rooms, nil
}

func sortedKeys(m map[string]room) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func list(names []string) string {
	if len(names) == 0 {
		return "-"
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "`" + n + "`"
	}
	return strings.Join(quoted, ", ")
}

// cliInternalStillImported lists, for each package of the CLI's module, the
// library's internal packages it still imports (its tests included), named
// as the rooms table names them. The CLI is to use the public API only,
// as a team would (issue 46): this list records what is left to do, and
// may only shrink. TestCLIImportsNoInternal fails on an import it does not
// list, and on a pair it lists that is no longer imported.
var cliInternalStillImported = map[string][]string{
	// show, list, spend, queue, keys, webhooks, serve, eval, replay, dev
	// and their tests read and write the ledger through ledgerdb.Store;
	// eval builds datasets (dataset); watch and serve follow a run's
	// events (runevents); webhooks manages endpoints (webhooks).
	"cmd/agentsaga": {
		"internal/dataset", "internal/ledgerdb", "internal/runevents", "internal/webhooks",
	},
	// The HTTP API: the same reads and writes of the ledger, the event
	// stream, the webhooks endpoints.
	"cmd/agentsaga/api": {
		"internal/ledgerdb", "internal/runevents", "internal/webhooks",
	},
	// The benchmarks drive the engine's machinery below the public API:
	// the ledger's statements (ledgerdb), the event log and the webhooks
	// deliverer.
	"cmd/agentsaga/bench": {
		"internal/ledgerdb", "internal/runevents", "internal/webhooks",
	},
}

// No package of the CLI's module (cmd/agentsaga) imports the library's
// internal/ packages, in its code or its tests: what the CLI needs, a team
// could need too, so it is public (and counted by internal/surface), and
// what only its tests need is in agentsagatest. The CLI's module may have
// internal packages of its own (cmd/agentsaga/internal/...).
func TestCLIImportsNoInternal(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-f",
		`{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}`,
		"./...")
	cmd.Dir = "cmd/agentsaga"
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./... in cmd/agentsaga: %v: %s", err, stderr.String())
	}
	const module = "github.com/agentsaga/agentsaga/"
	real := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		from := strings.TrimPrefix(fields[0], module)
		for _, imp := range fields[1:] {
			if to, ok := strings.CutPrefix(imp, module); ok && strings.HasPrefix(to, "internal/") &&
				!slices.Contains(real[from], to) {
				real[from] = append(real[from], to)
			}
		}
	}
	if len(real) == 0 && !strings.Contains(string(out), module+"cmd/agentsaga") {
		t.Fatalf("go list in cmd/agentsaga listed no package of the CLI:\n%s", out)
	}
	var problems []string
	for _, from := range slices.Sorted(maps.Keys(real)) {
		for _, to := range slices.Sorted(slices.Values(real[from])) {
			if !slices.Contains(cliInternalStillImported[from], to) {
				problems = append(problems, fmt.Sprintf("%s imports %s: the CLI uses the public API only (make what it needs public, or put what only tests need in agentsagatest)", from, to))
			}
		}
	}
	for _, from := range slices.Sorted(maps.Keys(cliInternalStillImported)) {
		for _, to := range cliInternalStillImported[from] {
			if !slices.Contains(real[from], to) {
				problems = append(problems, fmt.Sprintf("%s no longer imports %s: take the pair off cliInternalStillImported", from, to))
			}
		}
	}
	if len(problems) > 0 {
		t.Errorf("the CLI's imports of internal/:\n  %s", strings.Join(problems, "\n  "))
	}
}
