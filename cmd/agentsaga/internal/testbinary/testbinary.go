// Package testbinary is what the CLI module's process tests share: a test
// binary's run around its package's dev server (Main), and the agentsaga
// binary those tests start as worker processes (Agentsaga), built once for
// the whole test binary (or once for all of make test's, BinaryEnv).
// Each build was a link of the whole binary, a minute or more on a loaded
// 2-core machine, and the chaos harness, the fault, eval and deploy tests
// and six benchmark tests each built their own.
package testbinary

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/agentsagatest"
)

// Main runs m's tests around a dev server started as agentsagatest.Main
// starts it, handing it to started first, and removes the binary
// Agentsaga built before the test binary exits (which agentsagatest.Main,
// exiting itself, would not let a test binary do).
func Main(m *testing.M, started func(*testsuite.DevServer)) {
	os.Exit(run(m, started))
}

func run(m *testing.M, started func(*testsuite.DevServer)) int {
	options, err := agentsagatest.DevServerOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	server, err := testsuite.StartDevServer(context.Background(), options)
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the dev server from %s: %v\n", options.ExistingPath, err)
		return 1
	}
	defer func() { _ = server.Stop() }()
	started(server)
	defer built.remove()
	return m.Run()
}

// built is the test binary's one agentsaga binary.
var built shared

// shared is a binary built once, on first use, into a directory of its
// own that remove deletes.
type shared struct {
	mu   sync.Mutex
	dir  string
	path string
	err  error
}

// Agentsaga returns the agentsaga binary (package
// github.com/agentsaga/agentsaga/cmd/agentsaga), built without -race: the
// worker processes are the system under test, not the test binary. The
// first test to ask builds it, within ten minutes of its own (on a fresh
// clone beside the other packages on 2 cores a build was once killed at
// two); the others wait for that build and share its binary, which no test
// changes. Where BinaryEnv names a binary, that one is returned and
// nothing is built.
func Agentsaga(t *testing.T) string {
	t.Helper()
	built.mu.Lock()
	defer built.mu.Unlock()
	if built.path == "" && built.err == nil {
		if prebuilt := os.Getenv(BinaryEnv); prebuilt != "" {
			built.path, built.err = usePrebuilt(prebuilt)
		} else {
			start := time.Now()
			built.path, built.err = built.build()
			if built.err == nil {
				t.Logf("built %s in %s", built.path, time.Since(start).Round(time.Millisecond))
			}
		}
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// BinaryEnv names an agentsaga binary built beforehand from the same tree,
// which Agentsaga returns instead of building one. make test
// (scripts/test.sh) builds it once for the CLI module's three test
// binaries: each linked its own, 20-30 s of a 2-core machine that the
// suite keeps busy.
const BinaryEnv = "AGENTSAGA_TEST_BINARY"

// usePrebuilt returns path if it is an executable file: a name that is
// not one fails every test that runs it, naming the variable.
func usePrebuilt(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", BinaryEnv, err)
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s=%s: not an executable file", BinaryEnv, path)
	}
	return path, nil
}

func (b *shared) build() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("the process tests build the agentsaga binary and need the go tool on PATH: %w", err)
	}
	if b.dir, err = os.MkdirTemp("", "agentsaga-test-bin-"); err != nil {
		return "", err
	}
	bin := filepath.Join(b.dir, "agentsaga")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// -s -w: no symbol table or DWARF, which halves the link on a busy machine.
	out, err := exec.CommandContext(ctx, goTool, "build", "-ldflags=-s -w", "-o", bin, "github.com/agentsaga/agentsaga/cmd/agentsaga").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/agentsaga: %w: %s", err, out)
	}
	return bin, nil
}

func (b *shared) remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}
