package ledgertest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// Statement is one statement a store's pool sent.
type Statement struct {
	// Caller is what Statements.Caller named the statement's context.
	Caller string
	SQL    string
	// Batch numbers the pgx batch the statement went in, from 1 (the
	// statements of one batch share a round trip and a commit); 0 for a
	// statement sent alone.
	Batch int
}

// Statements records the statements a pool sends (a pgx QueryTracer and
// BatchTracer on every connection: Query, QueryRow, Exec and the queries
// of SendBatch), so a test can count a call's statements and round trips
// instead of timing them.
type Statements struct {
	// Caller names who sent a statement, from the context it was sent
	// with; a statement it does not name (false) is not recorded. Nil
	// records every statement, unnamed.
	Caller func(context.Context) (string, bool)

	mu      sync.Mutex
	sent    []Statement
	batches int
}

func (s *Statements) record(ctx context.Context, sql string, batch int) {
	caller, record := "", true
	if s.Caller != nil {
		caller, record = s.Caller(ctx)
	}
	if record {
		s.mu.Lock()
		s.sent = append(s.sent, Statement{Caller: caller, SQL: sql, Batch: batch})
		s.mu.Unlock()
	}
}

// TraceQueryStart implements pgx.QueryTracer.
func (s *Statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.record(ctx, data.SQL, 0)
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (s *Statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type batchNumber struct{}

// TraceBatchStart implements pgx.BatchTracer.
func (s *Statements) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.mu.Lock()
	s.batches++
	n := s.batches
	s.mu.Unlock()
	return context.WithValue(ctx, batchNumber{}, n)
}

// TraceBatchQuery implements pgx.BatchTracer.
func (s *Statements) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	n, _ := ctx.Value(batchNumber{}).(int)
	s.record(ctx, data.SQL, n)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (s *Statements) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// RoundTrips counts the round trips that sent statements: one per
// statement sent alone and one per batch.
func RoundTrips(statements []Statement) int {
	trips := 0
	batches := map[int]bool{}
	for _, s := range statements {
		switch {
		case s.Batch == 0:
			trips++
		case !batches[s.Batch]:
			batches[s.Batch] = true
			trips++
		}
	}
	return trips
}

// Take returns the statements recorded since the last Take, in the order
// they were sent, and forgets them.
func (s *Statements) Take() []Statement {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent := s.sent
	s.sent = nil
	return sent
}

// NewCountingStore is NewStore whose pool records its statements in
// statements (set its Caller before the store is used). Its pool holds
// MaxConns connections at most, as NewStore's.
func NewCountingStore(t testing.TB, statements *Statements) *ledgerdb.Store {
	t.Helper()
	config, err := pgxpool.ParseConfig(NewPooledDatabase(t))
	if err != nil {
		t.Fatalf("ledgertest: %v", err)
	}
	config.ConnConfig.Tracer = statements
	pool, err := pgxpool.NewWithConfig(context.Background(), config)
	if err != nil {
		t.Fatalf("ledgertest: %v", err)
	}
	t.Cleanup(pool.Close)
	store, err := ledgerdb.New(pool)
	if err != nil {
		t.Fatalf("ledgertest: %v", err)
	}
	return store
}
