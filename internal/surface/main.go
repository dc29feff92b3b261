// Command surface counts the exported identifiers of each package of the
// module, as issue 32 measures the public API: top-level functions, types,
// variables and constants, and the methods of exported types (what `go
// doc` lists), with the exported fields and interface methods of exported
// types in a column of their own. An exported alias of a type declared
// under internal/ (type SpendCap = ledgerdb.SpendCap) counts the exported
// methods of that type too, since users call them through the alias. Test
// files are not read; packages under internal/ are counted apart, since no
// user can import them. Run it from
// the module's root: go run ./internal/surface (make surface).
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	counts, fields, err := count(".")
	if err != nil {
		fmt.Fprintln(os.Stderr, "surface:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(counts))
	for dir := range counts {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	public, internal, publicFields := 0, 0, 0
	fmt.Printf("%5s %7s  %s\n", "names", "fields", "package")
	for _, dir := range dirs {
		fmt.Printf("%5d %7d  %s\n", counts[dir], fields[dir], dir)
		if isInternal(dir) {
			internal += counts[dir]
		} else {
			public += counts[dir]
			publicFields += fields[dir]
		}
	}
	fmt.Printf("%5d %7d  exported identifiers and fields users can import (%d more names under internal/)\n", public, publicFields, internal)
}

func isInternal(dir string) bool {
	return dir == "internal" || strings.HasPrefix(dir, "internal/") || strings.Contains(dir, "/internal/")
}

// count walks root's packages, skipping nested modules, testdata and
// examples, and counts each directory's exported identifiers.
func count(root string) (names, fields map[string]int, err error) {
	names, fields = map[string]int{}, map[string]int{}
	module, err := modulePath(root)
	if err != nil {
		return nil, nil, err
	}
	methods := map[string]int{} // "dir.Type": its exported methods
	var aliases []alias
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "examples") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a module of its own
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		if f.Name.Name == "main" {
			return nil // a command: nothing to import
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir = filepath.ToSlash(dir)
		n, m := exported(f)
		names[dir] += n
		fields[dir] += m
		for typ, k := range exportedMethods(f) {
			methods[dir+"."+typ] += k
		}
		aliases = append(aliases, internalAliases(f, dir, module)...)
		return nil
	})
	for _, a := range aliases {
		names[a.dir] += methods[a.target]
	}
	return names, fields, err
}

// alias is an exported alias in dir of the type target ("dir.Type") that
// a package under internal/ declares.
type alias struct{ dir, target string }

// internalAliases lists f's exported aliases of types declared under
// internal/ in this module.
func internalAliases(f *ast.File, dir, module string) []alias {
	imports := map[string]string{} // the name a file uses for a package: its directory
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		rel, ok := strings.CutPrefix(path, module+"/")
		if !ok || !isInternal(rel) {
			continue
		}
		name := filepath.Base(rel)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imports[name] = rel
	}
	var out []alias
	for _, decl := range f.Decls {
		d, ok := decl.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range d.Specs {
			s, ok := spec.(*ast.TypeSpec)
			if !ok || !s.Assign.IsValid() || !s.Name.IsExported() {
				continue
			}
			sel, ok := s.Type.(*ast.SelectorExpr)
			if !ok {
				continue
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && imports[pkg.Name] != "" {
				out = append(out, alias{dir: dir, target: imports[pkg.Name] + "." + sel.Sel.Name})
			}
		}
	}
	return out
}

// exportedMethods counts f's exported methods by the name of their
// receiver's type.
func exportedMethods(f *ast.File) map[string]int {
	out := map[string]int{}
	for _, decl := range f.Decls {
		if d, ok := decl.(*ast.FuncDecl); ok && d.Recv != nil && d.Name.IsExported() {
			if name := receiverName(d.Recv); name != "" {
				out[name]++
			}
		}
	}
	return out
}

// modulePath reads the module's path from root's go.mod.
func modulePath(root string) (string, error) {
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("read go.mod: %w", err)
	}
	for _, line := range strings.Split(string(mod), "\n") {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.TrimSpace(path), nil
		}
	}
	return "", fmt.Errorf("go.mod has no module line")
}

// exported counts f's exported identifiers, and the exported members of
// its exported types.
func exported(f *ast.File) (n, fields int) {
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil || receiverExported(d.Recv) {
				n++
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n++
						fields += members(s.Type)
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n, fields
}

// members counts the exported fields of a struct type, or the methods of
// an interface type.
func members(t ast.Expr) int {
	var fields *ast.FieldList
	switch t := t.(type) {
	case *ast.StructType:
		fields = t.Fields
	case *ast.InterfaceType:
		fields = t.Methods
	default:
		return 0
	}
	n := 0
	for _, field := range fields.List {
		for _, name := range field.Names {
			if name.IsExported() {
				n++
			}
		}
	}
	return n
}

func receiverExported(recv *ast.FieldList) bool {
	return ast.IsExported(receiverName(recv))
}

// receiverName is the name of a method's receiver's type, without its
// pointer or type parameters.
func receiverName(recv *ast.FieldList) string {
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
