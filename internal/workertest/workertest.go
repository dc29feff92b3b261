package workertest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/workflows"
)

// TemporalBinary finds bin/temporal at the root of a module that holds
// the working directory (the innermost that has one: the CLI's module sits
// inside the library's, and the binary is built at the repository's root),
// or returns an error that says how to build it.
func TemporalBinary() (string, error) {
	if path := os.Getenv("TEMPORAL_CLI"); path != "" {
		return path, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	missing := ""
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bin := filepath.Join(dir, "bin", "temporal")
			if _, err := os.Stat(bin); err == nil {
				return bin, nil
			}
			missing = bin // the outermost, at the end
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			if missing != "" {
				return "", fmt.Errorf("workertest: %s is missing; build it with `make bin/temporal`", missing)
			}
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
	server, err := testsuite.StartDevServer(ctx, devServerOptions(bin))
	if err != nil {
		return nil, fmt.Errorf("workertest: start dev server from %s: %w", bin, err)
	}
	return server, nil
}

// StartDevServerWithLimits is StartDevServer with dynamic config values
// set, such as "limit.blobSize.error=262144": a test can lower the history
// and payload limits that production hits only after hours.
func StartDevServerWithLimits(ctx context.Context, values ...string) (*testsuite.DevServer, error) {
	bin, err := TemporalBinary()
	if err != nil {
		return nil, err
	}
	options := devServerOptions(bin)
	for _, v := range values {
		options.ExtraArgs = append(options.ExtraArgs, "--dynamic-config-value", v)
	}
	server, err := testsuite.StartDevServer(ctx, options)
	if err != nil {
		return nil, fmt.Errorf("workertest: start dev server with %v from %s: %w", values, bin, err)
	}
	return server, nil
}

// StartDevServerWithUI is StartDevServer with the Temporal web UI enabled
// on a free port of 127.0.0.1. It returns the UI's base URL, e.g.
// http://127.0.0.1:41234, once the UI answers HTTP. Stop the server with
// Stop when done.
func StartDevServerWithUI(ctx context.Context) (*testsuite.DevServer, string, error) {
	bin, err := TemporalBinary()
	if err != nil {
		return nil, "", err
	}
	port, err := freePort()
	if err != nil {
		return nil, "", fmt.Errorf("workertest: pick a UI port: %w", err)
	}
	options := devServerOptions(bin)
	options.EnableUI = true
	options.UIPort = port
	server, err := testsuite.StartDevServer(ctx, options)
	if err != nil {
		return nil, "", fmt.Errorf("workertest: start dev server with UI from %s: %w", bin, err)
	}
	uiURL := "http://127.0.0.1:" + port
	if err := waitForHTTP(ctx, uiURL, 30*time.Second); err != nil {
		_ = server.Stop()
		return nil, "", fmt.Errorf("workertest: the dev server's UI at %s: %w", uiURL, err)
	}
	return server, uiURL, nil
}

// DevServerOptions are the options StartDevServer starts a server with:
// bin/temporal (TemporalBinary), an in-memory database on a free port, the
// default namespace and agentsaga's search attributes.
func DevServerOptions() (testsuite.DevServerOptions, error) {
	bin, err := TemporalBinary()
	if err != nil {
		return testsuite.DevServerOptions{}, err
	}
	return devServerOptions(bin), nil
}

func devServerOptions(bin string) testsuite.DevServerOptions {
	return testsuite.DevServerOptions{
		ExistingPath:     bin,
		ClientOptions:    &client.Options{Namespace: "default"},
		LogLevel:         "error",
		SearchAttributes: workflows.SearchAttributes(),
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1 and releases it.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

// waitForHTTP polls url until it answers with any HTTP response.
func waitForHTTP(ctx context.Context, url string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	httpClient := &http.Client{Timeout: 2 * time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := httpClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer within %s: %w", limit, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Main runs a test binary's tests against one dev server: it starts the
// server, hands it to started, runs the tests, stops the server and exits.
// Call it from TestMain.
func Main(m *testing.M, started func(*testsuite.DevServer)) {
	server, err := StartDevServer(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	started(server)
	code := m.Run()
	_ = server.Stop()
	os.Exit(code)
}

// SetCurrentVersion makes build the current version of a worker
// deployment, as `temporal worker deployment set-current-version` does,
// once a worker of that build has polled (the server learns of a version
// from its workers' polls). It gives up when ctx ends.
func SetCurrentVersion(ctx context.Context, c client.Client, deployment, build string) error {
	handle := c.WorkerDeploymentClient().GetHandle(deployment)
	for {
		_, err := handle.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: build})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("workertest: make build %s current in deployment %s: %w", build, deployment, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
