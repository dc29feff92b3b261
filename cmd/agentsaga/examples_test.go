package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/workflows"
)

// Every spec shipped in examples/ parses.
func TestExampleSpecsParse(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, path := range paths {
		_, err := workflows.ReadSpec(path)
		require.NoError(t, err, path)
	}
}

// The full spec example in docs/run-spec.md parses.
func TestRunSpecDocExampleParses(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "run-spec.md"))
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(doc), "\n## A full spec\n")
	require.True(t, ok)
	_, block, ok = strings.Cut(block, "```yaml\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	spec, err := workflows.ParseSpec([]byte(block))
	require.NoError(t, err)
	require.Len(t, spec.Tools, 3)
}

// `make fuzz` runs every fuzz target in the module: a target added without
// being listed in the Makefile would never be fuzzed for long.
func TestMakeFuzzListsEveryTarget(t *testing.T) {
	root := filepath.Join("..", "..")
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	var missing []string
	found := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg, _ := filepath.Rel(root, filepath.Dir(path))
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			found++
			if entry := "./" + filepath.ToSlash(pkg) + ":" + m[1]; !strings.Contains(string(makefile), entry) {
				missing = append(missing, entry)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotZero(t, found)
	require.Empty(t, missing, "add these to FUZZ_TARGETS in the Makefile")
}
