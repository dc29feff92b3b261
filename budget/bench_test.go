package budget_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/budget"
)

// benchBucket is a bucket that never runs dry under the real clock: with
// this capacity and refill a benchmark measures the granting path, not a
// string of cheap denials.
func benchBucket(b *testing.B) *budget.TokenBucket {
	b.Helper()
	bucket, err := budget.NewTokenBucket(budget.BucketConfig{Capacity: 1e12, RefillPerSecond: 1e12, SuccessBonus: 1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return bucket
}

// parallel64 makes RunParallel start 64 goroutines (32 per CPU on the
// 2-CPU target machine) whatever GOMAXPROCS is, because the target is
// about many agents contending for one bucket, not about the CPU count.
func parallel64(b *testing.B) {
	b.Helper()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
}

func BenchmarkTokenBucketTryWithdraw(b *testing.B) {
	bucket := benchBucket(b)
	b.ReportAllocs()
	for b.Loop() {
		if !bucket.TryWithdraw() {
			b.Fatal("denied: the benchmark bucket ran dry")
		}
	}
}

func BenchmarkTokenBucketDeposit(b *testing.B) {
	bucket := benchBucket(b)
	b.ReportAllocs()
	for b.Loop() {
		bucket.Deposit()
	}
}

func BenchmarkTokenBucketTryWithdrawParallel64(b *testing.B) {
	bucket := benchBucket(b)
	b.ReportAllocs()
	parallel64(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !bucket.TryWithdraw() {
				b.Error("denied: the benchmark bucket ran dry")
				return
			}
		}
	})
}

func BenchmarkTokenBucketDepositParallel64(b *testing.B) {
	bucket := benchBucket(b)
	b.ReportAllocs()
	parallel64(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bucket.Deposit()
		}
	})
}

// BenchmarkTokenBucketTryWithdrawInjectedClock separates the bucket's own
// cost from the clock's: its clock is a counter stepping a microsecond per
// read, far cheaper than the kernel's monotonic clock the others read.
func BenchmarkTokenBucketTryWithdrawInjectedClock(b *testing.B) {
	var ticks atomic.Int64
	epoch := time.Unix(0, 0)
	clock := func() time.Time { return epoch.Add(time.Duration(ticks.Add(1)) * time.Microsecond) }
	bucket, err := budget.NewTokenBucket(budget.BucketConfig{Capacity: 100, RefillPerSecond: 1e6}, clock)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if !bucket.TryWithdraw() {
			b.Fatal("denied: the benchmark bucket ran dry")
		}
	}
}
