package main

import (
	"os"
	"path/filepath"
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

// The full spec example in the README parses.
func TestReadmeSpecParses(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, block, ok := strings.Cut(string(readme), "## The run spec")
	require.True(t, ok)
	_, block, ok = strings.Cut(block, "```yaml\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	spec, err := workflows.ParseSpec([]byte(block))
	require.NoError(t, err)
	require.Len(t, spec.Tools, 3)
}
