// Command surface counts the exported identifiers of each package of the
// module, as issue 32 measures the public API: top-level functions, types,
// variables and constants, and the methods of exported types (what `go
// doc` lists), with the exported fields and interface methods of exported
// types in a column of their own. Test files are not read; packages under
// internal/ are counted apart, since no user can import them. Run it from
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
		dir := filepath.ToSlash(filepath.Dir(path))
		n, m := exported(f)
		names[dir] += n
		fields[dir] += m
		return nil
	})
	return names, fields, err
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
			return x.IsExported()
		default:
			return false
		}
	}
}
