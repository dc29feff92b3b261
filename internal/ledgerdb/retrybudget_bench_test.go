package ledgerdb_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/budget"
	"github.com/agentsaga/agentsaga/internal/ledgertest"
)

// BenchmarkPostgresBucket measures the shared bucket's take throughput for
// K workers (separate pools) x G goroutines each, and checks under load,
// with refill and deposits, that the bucket never admits more than it
// earned.
func BenchmarkPostgresBucket(b *testing.B) {
	// A pool as large as a worker's most goroutines (G=8), as ledgerdb.Open's
	// default (32) gives them: the figures measure the bucket, not a pool.
	stores := openWorkers(b, 4, 8)
	for _, k := range []int{1, 4} {
		for _, g := range []int{1, 8} {
			b.Run(fmt.Sprintf("K=%d/G=%d", k, g), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				bucket := fmt.Sprintf("bench-%d-%d", k, g)
				if err := stores[0].EnsureBucket(ctx, bucket, budget.BucketConfig{Capacity: 1e15}); err != nil {
					b.Fatal(err)
				}
				var next atomic.Int64
				var failed atomic.Value
				var wg sync.WaitGroup
				b.ResetTimer()
				for w := range k {
					for range g {
						wg.Go(func() {
							for next.Add(1) <= int64(b.N) {
								ok, err := ledgertest.TakeRetryToken(ctx, stores[w], bucket)
								if err != nil {
									failed.CompareAndSwap(nil, err)
									return
								}
								if !ok {
									failed.CompareAndSwap(nil, fmt.Errorf("bucket %s denied a take", bucket))
									return
								}
							}
						})
					}
				}
				wg.Wait()
				b.StopTimer()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "takes/s")
			})
		}
	}

	b.Run("overadmission", func(b *testing.B) {
		const (
			capacity = 100.0
			refill   = 20.0
			deposit  = 0.1
			k, g     = 4, 8
			runFor   = 2 * time.Second
		)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bucket := fmt.Sprintf("overadmission-%d", time.Now().UnixNano())
		var grants, denials, deposits atomic.Int64
		var failed atomic.Value
		var wg sync.WaitGroup

		// The bucket is created full after start, so every token it can hand
		// out is capacity + refill x (end - start) + the deposits.
		start := time.Now()
		if err := stores[0].EnsureBucket(ctx, bucket, budget.BucketConfig{Capacity: capacity, RefillPerSecond: refill}); err != nil {
			b.Fatal(err)
		}
		deadline := start.Add(runFor)
		for w := range k {
			for range g {
				wg.Go(func() {
					store := stores[w]
					for time.Now().Before(deadline) {
						ok, err := ledgertest.TakeRetryToken(ctx, store, bucket)
						if err != nil {
							failed.CompareAndSwap(nil, err)
							return
						}
						if !ok {
							denials.Add(1)
							continue
						}
						if grants.Add(1)%10 == 0 {
							if _, err := store.DepositToBucket(ctx, bucket, deposit); err != nil {
								failed.CompareAndSwap(nil, err)
								return
							}
							deposits.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		elapsed := time.Since(start).Seconds() // an upper bound on the bucket's lifetime so far
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}

		earned := math.Floor(capacity + refill*elapsed + float64(deposits.Load())*deposit)
		overAdmission := math.Max(0, float64(grants.Load())-earned)
		b.ReportMetric(float64(grants.Load()), "grants")
		b.ReportMetric(float64(denials.Load()), "denials")
		b.ReportMetric(float64(deposits.Load())*deposit, "deposited")
		b.ReportMetric(elapsed, "elapsed-s")
		b.ReportMetric(earned, "earned")
		b.ReportMetric(overAdmission, "over-admitted")
		if overAdmission > 0 {
			b.Fatalf("over-admitted %v: %d grants, but only %v tokens were earned in %.3fs",
				overAdmission, grants.Load(), earned, elapsed)
		}
	})
}
