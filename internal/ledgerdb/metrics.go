package ledgerdb

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/jackc/pgx/v5"
)

// runStatuses lists every status a run can have (the runs table's CHECK
// constraint), so a report can show zero for the ones no run is in.
var runStatuses = []string{
	agentsagatype.RunQueued, agentsagatype.RunRunning, agentsagatype.RunCompleted, agentsagatype.RunPartial, agentsagatype.RunEscalated, agentsagatype.RunCompensated, agentsagatype.RunNeedsAttention, agentsagatype.RunFailed, agentsagatype.RunTerminated,
}

// FleetFigures are the fleet-wide figures the metrics endpoint reports,
// read from the ledger so that every worker reports the same numbers and
// they survive restarts.
type FleetFigures struct {
	// LeafCalls counts every attempt that left a process (leaf_calls rows,
	// pruned ones included: it is a counter).
	LeafCalls int64
	// LogicalCalls counts their first attempts: the calls the workflows
	// asked for, retries not counted.
	LogicalCalls int64
	// RunsByStatus holds how many runs are in each status now: every status
	// a run can have (zero included) and any other found. Pruned runs are
	// gone from it.
	RunsByStatus map[string]int64
	// USDSpent and TokensSpent are summed over finished runs (finished_at
	// set), pruned ones included; a running run's spend is not written
	// until it ends.
	USDSpent    float64
	TokensSpent int64
	// Buckets and Breakers are every retry bucket and circuit breaker row,
	// ordered by name.
	Buckets  []BucketFigure
	Breakers []BreakerFigure
}

// Amplification is leaf calls per logical call; 0 when there are none.
func (f FleetFigures) Amplification() float64 {
	if f.LogicalCalls == 0 {
		return 0
	}
	return float64(f.LeafCalls) / float64(f.LogicalCalls)
}

// BucketFigure is one retry bucket: its level now (refill included, as
// agentsaga_bucket_level computes it) and its capacity.
type BucketFigure struct {
	Name     string
	Tokens   float64
	Capacity float64
}

// BreakerFigure is one circuit breaker's state: budget.BreakerClosed,
// budget.BreakerOpen or budget.BreakerHalfOpen.
type BreakerFigure struct {
	Dependency string
	State      string
}

// FleetFigures reads every figure in one round trip (a batch of three
// queries). The counts come from fleet_counters, which triggers keep as
// leaf calls and runs are written (migration 00013), so a scrape reads a
// few rows however large the ledger is. Its one write folds the deltas the
// triggers appended since the last scrape; a bucket's level is computed,
// not settled.
func (s *Store) FleetFigures(ctx context.Context) (FleetFigures, error) {
	batch := &pgx.Batch{}
	batch.Queue(`SELECT name, value FROM agentsaga_fleet_counters()`)
	batch.Queue(`SELECT name, coalesce(agentsaga_bucket_level(name), 0), capacity FROM retry_buckets ORDER BY name`)
	batch.Queue(`SELECT dependency, state FROM circuit_breakers ORDER BY dependency`)
	results := s.pool.SendBatch(ctx, batch)
	defer results.Close()

	f := FleetFigures{RunsByStatus: make(map[string]int64, len(runStatuses))}
	for _, status := range runStatuses {
		f.RunsByStatus[status] = 0
	}
	rows, err := results.Query()
	if err != nil {
		return FleetFigures{}, fmt.Errorf("ledger: fleet figures: counters: %w", err)
	}
	var (
		name  string
		value float64
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		switch {
		case name == "leaf_calls":
			f.LeafCalls = int64(value)
		case name == "logical_calls":
			f.LogicalCalls = int64(value)
		case name == "usd_spent":
			f.USDSpent = value
		case name == "tokens_spent":
			f.TokensSpent = int64(value)
		case strings.HasPrefix(name, "runs:"):
			f.RunsByStatus[strings.TrimPrefix(name, "runs:")] = int64(value)
		}
		return nil
	}); err != nil {
		return FleetFigures{}, fmt.Errorf("ledger: fleet figures: counters: %w", err)
	}

	rows, err = results.Query()
	if err != nil {
		return FleetFigures{}, fmt.Errorf("ledger: fleet figures: retry buckets: %w", err)
	}
	f.Buckets, err = pgx.CollectRows(rows, pgx.RowToStructByPos[BucketFigure])
	if err != nil {
		return FleetFigures{}, fmt.Errorf("ledger: fleet figures: retry buckets: %w", err)
	}

	rows, err = results.Query()
	if err != nil {
		return FleetFigures{}, fmt.Errorf("ledger: fleet figures: circuit breakers: %w", err)
	}
	f.Breakers, err = pgx.CollectRows(rows, pgx.RowToStructByPos[BreakerFigure])
	if err != nil {
		return FleetFigures{}, fmt.Errorf("ledger: fleet figures: circuit breakers: %w", err)
	}
	if err := results.Close(); err != nil {
		return FleetFigures{}, fmt.Errorf("ledger: fleet figures: %w", err)
	}
	return f, nil
}
