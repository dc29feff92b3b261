package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// AGENTSAGA_CPUPROFILE makes the process write a CPU profile, named after
// its PID; a path it cannot write to is named, and the process goes on.
func TestCPUProfileIsWrittenWhereAsked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu")
	t.Setenv(cpuProfileEnv, path)
	var stderr strings.Builder
	startCPUProfile(&stderr)()
	info, err := os.Stat(fmt.Sprintf("%s.%d", path, os.Getpid()))
	require.NoError(t, err)
	require.Positive(t, info.Size(), "a profile has a header even with no samples")
	require.Empty(t, stderr.String())

	t.Setenv(cpuProfileEnv, filepath.Join(t.TempDir(), "missing", "cpu"))
	startCPUProfile(&stderr)()
	require.Contains(t, stderr.String(), cpuProfileEnv+"=")
	require.Contains(t, stderr.String(), "running without a profile")
}
