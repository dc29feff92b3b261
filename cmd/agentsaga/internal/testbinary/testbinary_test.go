package testbinary

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A prebuilt binary is taken only if it is an executable file; otherwise
// the error names the variable that pointed at it.
func TestUsePrebuiltTakesOnlyAnExecutableFile(t *testing.T) {
	dir := t.TempDir()
	executable := filepath.Join(dir, "agentsaga")
	if err := os.WriteFile(executable, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := usePrebuilt(executable); err != nil || got != executable {
		t.Fatalf("usePrebuilt(%s) = %q, %v; want it back", executable, got, err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), plain, dir} {
		if _, err := usePrebuilt(bad); err == nil || !strings.Contains(err.Error(), BinaryEnv) {
			t.Errorf("usePrebuilt(%s) = %v; want an error naming %s", bad, err, BinaryEnv)
		}
	}
}
