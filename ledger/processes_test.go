package ledger_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgertest"
)

// childDatabaseEnv tells a re-executed test binary that it is one of the
// worker processes of TestBucketNeverOverAdmitsAcrossProcesses, and which
// database holds the bucket.
const childDatabaseEnv = "AGENTSAGA_BUCKET_CHILD_DATABASE"

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
	store, err := ledger.Open(context.Background(), url)
	require.NoError(t, err)
	defer store.Close()
	require.NoError(t, store.EnsureBucket(context.Background(), "fleet", budget.BucketConfig{Capacity: capacity}))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outputs := make([]string, processes)
	errs := make([]error, processes)
	var wg sync.WaitGroup
	for p := range processes {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBucketChildProcess$", "-test.v")
			cmd.Env = append(os.Environ(), childDatabaseEnv+"="+url)
			out, err := cmd.CombinedOutput()
			outputs[p], errs[p] = string(out), err
		})
	}
	wg.Wait()
	total := 0
	for p := range processes {
		require.NoError(t, errs[p], "child %d:\n%s", p, outputs[p])
		granted, ok := grantedIn(outputs[p])
		require.True(t, ok, "child %d printed no grant count:\n%s", p, outputs[p])
		assert.Positive(t, granted, "child %d took part", p)
		total += granted
	}
	level, err := store.BucketLevel(context.Background(), "fleet")
	require.NoError(t, err)
	t.Logf("%d processes x 16 goroutines: %d grants from a bucket of %d; over-admission %d; level after %.2f",
		processes, total, capacity, total-capacity, level)
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
	ctx := context.Background()
	store, err := ledger.Open(ctx, url)
	require.NoError(t, err)
	defer store.Close()
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				ok, err := store.TakeRetryToken(ctx, "fleet")
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
