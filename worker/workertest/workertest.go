// Package workertest starts a real Temporal dev server for integration
// tests, from the bin/temporal binary that `make bin/temporal` builds. It
// never downloads anything.
package workertest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/workflows"
)

// TemporalBinary finds bin/temporal at the root of the module that holds
// the working directory, or returns an error that says how to build it.
func TemporalBinary() (string, error) {
	if path := os.Getenv("TEMPORAL_CLI"); path != "" {
		return path, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bin := filepath.Join(dir, "bin", "temporal")
			if _, err := os.Stat(bin); err != nil {
				return "", fmt.Errorf("workertest: %s is missing; build it with `make bin/temporal`", bin)
			}
			return bin, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("workertest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// StartDevServer starts a dev server on a free port with an in-memory
// database. Stop it with Stop when done.
func StartDevServer(ctx context.Context) (*testsuite.DevServer, error) {
	bin, err := TemporalBinary()
	if err != nil {
		return nil, err
	}
	server, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:     bin,
		ClientOptions:    &client.Options{Namespace: "default"},
		LogLevel:         "error",
		SearchAttributes: workflows.SearchAttributes(),
	})
	if err != nil {
		return nil, fmt.Errorf("workertest: start dev server from %s: %w", bin, err)
	}
	return server, nil
}
