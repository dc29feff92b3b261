package runevents_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/runevents"
)

// countingPool counts the statements its connections send.
func countingPool(t *testing.T, statements *atomic.Int64) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(newPool(t).Config().ConnString())
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = countingTracer{statements}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Many followers of one run, some from its start, some from the middle,
// some joining late: each gets every event after its start exactly once,
// in order, while the run's log grows, and the log is read by one shared
// reader, not once per follower.
func TestAFeedsFollowersShareOneReader(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var statements atomic.Int64
	pool := countingPool(t, &statements)
	log := runevents.New(pool)
	hub := runevents.NewHub(pool)
	hubCtx, stopHub := context.WithCancel(ctx)
	defer stopHub()
	go hub.Run(hubCtx, nil)
	feed := runevents.NewFeed(log, hub, 5*time.Second)

	const total, followers = 300, 200
	publish := func(from, to int) {
		for i := from; i <= to; i++ {
			_, err := log.Publish(ctx, "wf", delta(fmt.Sprintf("d-%03d", i), fmt.Sprint(i)))
			require.NoError(t, err)
		}
	}
	publish(1, 50)

	var wg sync.WaitGroup
	got := make([][]int64, followers)
	follow := func(i int, after int64) {
		defer wg.Done()
		followCtx, stop := context.WithCancel(ctx)
		defer stop()
		err := feed.Follow(followCtx, "wf", after, func(e runevents.Event) error {
			got[i] = append(got[i], e.Seq)
			if e.Seq == total {
				stop()
			}
			return nil
		})
		assert.NoError(t, err)
	}
	afterOf := func(i int) int64 { return int64(i % 60) } // 0..59: before, at and after the head of 50
	for i := range followers / 2 {
		wg.Add(1)
		go follow(i, afterOf(i))
	}
	time.Sleep(100 * time.Millisecond) // (the followers are reading; any order is fine)
	before := statements.Load()
	publish(51, 200)
	for i := followers / 2; i < followers; i++ {
		wg.Add(1)
		go follow(i, afterOf(i))
	}
	publish(201, total)
	wg.Wait()

	for i, seqs := range got {
		want := make([]int64, 0, total)
		for s := afterOf(i) + 1; s <= total; s++ {
			want = append(want, s)
		}
		require.Equal(t, want, seqs, "follower %d, after %d", i, afterOf(i))
	}
	// 250 publishes after the first followers came; their reads of the
	// log: a few per publish for the shared reader, plus each late
	// follower's catch-up, far fewer than a read per follower per event.
	reads := statements.Load() - before - (total - 50)
	t.Logf("%d followers, %d events: %d reads of the log", followers, total, reads)
	assert.Less(t, reads, int64(followers*5), "followers share one reader")
}

// countingTracer counts the queries sent through a pool.
type countingTracer struct{ n *atomic.Int64 }

func (c countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
