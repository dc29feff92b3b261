package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatest"
)

// The UI link is printed only where the UI is known: TEMPORAL_UI, Temporal
// Cloud for a Cloud address, the dev server's UI for the dev server's
// address, and no link for a cluster whose UI could be anywhere.
func TestUILinkComesFromConfiguration(t *testing.T) {
	cases := []struct {
		ui, address, namespace, id, want string
	}{
		{"", "127.0.0.1:7233", "default", "run-1", "http://127.0.0.1:8233/namespaces/default/workflows/run-1"},
		{"", "localhost:7233", "default", "run-1", "http://127.0.0.1:8233/namespaces/default/workflows/run-1"},
		{"", "prod.a1b2c.tmprl.cloud:7233", "prod.a1b2c", "run-1", "https://cloud.temporal.io/namespaces/prod.a1b2c/workflows/run-1"},
		{"", "us-east-1.aws.api.temporal.io:7233", "prod.a1b2c", "run-1", "https://cloud.temporal.io/namespaces/prod.a1b2c/workflows/run-1"},
		{"", "temporal-frontend.temporal.svc:7233", "default", "run-1", ""},
		{"", "127.0.0.1:7234", "default", "run-1", ""},
		{"https://temporal.example.com/", "temporal-frontend.temporal.svc:7233", "agents", "run-1", "https://temporal.example.com/namespaces/agents/workflows/run-1"},
		{"https://temporal.example.com", "prod.a1b2c.tmprl.cloud:7233", "prod.a1b2c", "run-1", "https://temporal.example.com/namespaces/prod.a1b2c/workflows/run-1"},
		{"", "127.0.0.1:7233", "default", "a b/c", "http://127.0.0.1:8233/namespaces/default/workflows/a%20b%2Fc"},
	}
	for _, c := range cases {
		t.Setenv("TEMPORAL_UI", c.ui)
		assert.Equal(t, c.want, uiLink(c.address, c.namespace, c.id), "TEMPORAL_UI=%q address %s", c.ui, c.address)
	}
}

// --profile and TEMPORAL_PROFILE pick a temporal.toml profile for every
// command that dials: `run` starts a run on the server the profile names
// (and prints no UI link, since it is not the dev server's address), and a
// profile that names an unreachable server makes `resume` fail naming its
// address.
func TestProfileSelectsTheServer(t *testing.T) {
	t.Setenv("DATABASE_URL", agentsagatest.NewDatabase(t))
	for _, name := range []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_PROFILE", "TEMPORAL_UI"} {
		t.Setenv(name, "")
		require.NoError(t, os.Unsetenv(name))
	}
	config := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`
[profile.default]
address = "127.0.0.1:1"

[profile.dev]
address = %q
namespace = "default"
`, devServer.FrontendHostPort())), 0o600))
	t.Setenv("TEMPORAL_CONFIG_FILE", config)
	spec := writeFile(t, "spec.yaml", "goal: g\nbudget: {steps: 2}\nmodel: {provider: scripted, script: [{content: x}]}\n")
	// No worker here runs them, and another test's worker must not.
	t.Cleanup(func() {
		for _, id := range []string{"profile-run-flag", "profile-run-env"} {
			_ = devServer.Client().TerminateWorkflow(context.Background(), id, "", "test over")
		}
	})

	out, err := runCLI(t, "run", "--profile", "dev", "--spec", spec, "--id", "profile-run-flag")
	require.NoError(t, err)
	assert.Contains(t, out, "started run profile-run-flag")
	assert.NotContains(t, out, "UI:", "no link for an address that is not the dev server's default")
	_, err = devServer.Client().DescribeWorkflowExecution(t.Context(), "profile-run-flag", "")
	require.NoError(t, err, "the run is on the profile's server")

	t.Setenv("TEMPORAL_PROFILE", "dev")
	_, err = runCLI(t, "run", "--spec", spec, "--id", "profile-run-env")
	require.NoError(t, err)

	t.Setenv("TEMPORAL_PROFILE", "")
	_, err = runCLI(t, "resume", "some-run", "--message", "go on")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "temporal at 127.0.0.1:1", "the default profile")
	_, err = runCLI(t, "resume", "some-run", "--message", "go on", "--profile", "staging")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `profile "staging"`)
	assert.NotContains(t, err.Error(), "\n")
}

// The first SIGTERM ends the context, so a worker drains; the second exits
// at once, without waiting for the calls in flight.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	ctx, stop := stopOnSignalsExiting(&stderr, func(code int) { exited <- code })
	defer stop()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the first SIGTERM did not end the context")
	}
	select {
	case code := <-exited:
		t.Fatalf("exited (%d) at the first signal; it must drain", code)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-exited:
		assert.Equal(t, 1, code)
		assert.True(t, strings.Contains(stderr.String(), "stopping now"), stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the second SIGTERM did not stop the process")
	}
}
