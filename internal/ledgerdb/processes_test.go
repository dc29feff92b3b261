package ledgerdb_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// childDatabaseEnv tells a re-executed test binary that it is one of the
// worker processes of TestBucketNeverOverAdmitsAcrossProcesses, and which
// database holds the bucket.
const childDatabaseEnv = "AGENTSAGA_BUCKET_CHILD_DATABASE"

// childStartEnv names the directory where each child, its pool connected,
// leaves a file saying it is ready, and waits for the parent's "go" file.
// Without it a child whose start (a -race binary, on a machine other
// packages load) came late found the bucket drained and took nothing.
const childStartEnv = "AGENTSAGA_BUCKET_CHILD_START"

// Several operating-system processes, each with its own pool and many
// goroutines, drain one fleet bucket at once: together they are granted
// exactly its capacity, never a token more. The processes are this test
// binary run again in child mode, so they are real processes with nothing
// shared but Postgres.
func TestBucketNeverOverAdmitsAcrossProcesses(t *testing.T) {
	if os.Getenv(childDatabaseEnv) != "" {
		t.Skip("this process is a child of the test")
	}
	t.Parallel()
	const capacity, processes = 300, 4
	url := ledgertest.NewDatabase(t)
	store, err := ledgerdb.Open(context.Background(), url)
	require.NoError(t, err)
	defer store.Close()
	require.NoError(t, store.EnsureBucket(context.Background(), "fleet", budget.BucketConfig{Capacity: capacity}))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outputs := make([]string, processes)
	errs := make([]error, processes)
	start := t.TempDir()
	var wg sync.WaitGroup
	for p := range processes {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBucketChildProcess$", "-test.v")
			// The children's 16 goroutines share 2 connections each (with
			// the parent's one in use, 9), not a worker's 32.
			cmd.Env = append(os.Environ(), childDatabaseEnv+"="+ledgertest.WithMaxConns(url, ledgertest.MaxConns/processes),
				childStartEnv+"="+start)
			out, err := cmd.CombinedOutput()
			outputs[p], errs[p] = string(out), err
		})
	}
	// Every child ready (or one gone: its error is reported below), then
	// all of them at once.
	exited := make(chan struct{})
	go func() { wg.Wait(); close(exited) }()
	for ready := 0; ready < processes; {
		select {
		case <-exited:
			ready = processes
		case <-ctx.Done():
			t.Fatalf("%d of %d children ready before %v", ready, processes, ctx.Err())
		case <-time.After(10 * time.Millisecond):
			matches, _ := filepath.Glob(filepath.Join(start, "ready-*"))
			ready = len(matches)
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(start, "go"), nil, 0o644))
	<-exited
	total, tookPart := 0, 0
	grants := make([]int, processes)
	for p := range processes {
		require.NoError(t, errs[p], "child %d:\n%s", p, outputs[p])
		granted, ok := grantedIn(outputs[p])
		require.True(t, ok, "child %d printed no grant count:\n%s", p, outputs[p])
		grants[p] = granted
		total += granted
		if granted > 0 {
			tookPart++
		}
	}
	// Contention across processes needs two of them at least; that all
	// four take part is likely (they start together), not owed.
	assert.GreaterOrEqual(t, tookPart, 2, "children granted %v: two or more took part", grants)
	level, err := ledgertest.BucketLevel(context.Background(), store, "fleet")
	require.NoError(t, err)
	t.Logf("%d processes x 16 goroutines: %d grants (%v) from a bucket of %d; over-admission %d; level after %.2f",
		processes, total, grants, capacity, total-capacity, level)
	assert.Equal(t, capacity, total, "over-admission must be 0 and every token must be granted")
	assert.Less(t, level, 1.0)
}

// TestBucketChildProcess is the body of one child process: 16 goroutines
// take tokens until the bucket says no; it prints how many it was granted.
func TestBucketChildProcess(t *testing.T) {
	url := os.Getenv(childDatabaseEnv)
	if url == "" {
		t.Skip("run only as a child of TestBucketNeverOverAdmitsAcrossProcesses")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := ledgerdb.Open(ctx, url)
	require.NoError(t, err)
	defer store.Close()
	if start := os.Getenv(childStartEnv); start != "" {
		// The pool's connections made, ready; then wait for the others.
		conns := make([]*pgxpool.Conn, store.Pool().Config().MaxConns)
		for i := range conns {
			conns[i], err = store.Pool().Acquire(ctx)
			require.NoError(t, err)
		}
		for _, conn := range conns {
			conn.Release()
		}
		require.NoError(t, os.WriteFile(filepath.Join(start, fmt.Sprintf("ready-%d", os.Getpid())), nil, 0o644))
		for {
			if _, err := os.Stat(filepath.Join(start, "go")); err == nil {
				break
			}
			require.NoError(t, ctx.Err(), "the parent never said go")
			time.Sleep(2 * time.Millisecond)
		}
	}
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				ok, err := ledgertest.TakeRetryToken(ctx, store, "fleet")
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					return
				}
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("granted=%d\n", granted.Load())
}

func grantedIn(output string) (int, bool) {
	for _, line := range strings.Split(output, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "granted="); ok {
			n, err := strconv.Atoi(v)
			return n, err == nil
		}
	}
	return 0, false
}
