// Package coalesce owns the ledger's statement batching: the claims and
// completions a worker's concurrent calls send at the same moment go to
// Postgres together, as one pgx batch (one round trip, one commit), each
// statement keeping the meaning it has alone. Only package ledger imports it.
package coalesce

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Coalescer sends the claims and completions that a worker's calls make at
// the same moment together, as one pgx batch: one round trip and one commit
// (a batch runs as one implicit transaction) for all of them, where each
// alone would pay its own. A statement goes out at once while fewer than
// batchSlots batches are in flight, so a lone call waits for nothing; the
// ones that arrive while every slot is busy go out together when one frees.
//
// Each statement keeps its meaning: it is the statement a lone call sends,
// a batch takes its row locks in key order, and a batch the server refuses
// (one statement's error aborts the transaction; a deadlock) is rolled back
// whole and sent again one statement at a time, so each caller gets its own
// statement's answer. A connection lost before the batch's commit was
// confirmed fails each of its statements, as it would fail a lone one.
type Coalescer struct {
	pool *pgxpool.Pool
	// slots holds a token per batch in flight.
	slots chan struct{}

	mu    sync.Mutex
	queue []*queued
}

// batchSlots is how many batches a store keeps in flight at once: enough
// that a statement rarely waits, few enough that concurrent calls share
// round trips and commits. On the 2-core benchmark machine, 8 clients'
// calls ran 20% faster with two than with no batching (one slot: 3%,
// three: 13%), at 28% less CPU a call, Postgres' and the worker's
// (BENCHMARKS.md, ledger writes). A fleet's workers each have their own.
// maxBatch bounds one batch.
const (
	batchSlots = 2
	maxBatch   = 64
)

// New is a Coalescer sending its batches on pool.
func New(pool *pgxpool.Pool) *Coalescer {
	return &Coalescer{pool: pool, slots: make(chan struct{}, batchSlots)}
}

// queued is one statement waiting for its batch.
type queued struct {
	ctx   context.Context
	order string // its place in a batch: the key whose row it locks
	// checkedSQL is a constant statement (TestLedgerSQLIsConstant checks
	// every call of coalesced).
	checkedSQL string
	args       []any
	scan       func(pgx.Row) (any, error)
	done       chan answer
	taken      bool // under Coalescer.mu: a batch has it
}

// answer is what a statement's scan read, or its error.
type answer struct {
	value any
	err   error
}

// Row runs sql with args as one statement of c's next batch and
// returns what scan reads from its one row (or pgx.ErrNoRows, or the
// statement's error); order is the key whose row the statement locks. When
// ctx ends first it returns ctx's error: the statement may still commit
// then, as a statement cancelled mid-flight may, and what it read is
// dropped.
func Row[T any](ctx context.Context, c *Coalescer, order, sql string, args []any, scan func(pgx.Row) (T, error)) (T, error) {
	a := c.queryRow(ctx, order, sql, args, func(row pgx.Row) (any, error) { return scan(row) })
	value, _ := a.value.(T)
	return value, a.err
}

// queryRow is Row's untyped body.
func (c *Coalescer) queryRow(ctx context.Context, order, sql string, args []any, scan func(pgx.Row) (any, error)) answer {
	if err := ctx.Err(); err != nil {
		return answer{err: err}
	}
	q := &queued{ctx: ctx, order: order, checkedSQL: sql, args: args, scan: scan, done: make(chan answer, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, q)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		taken := q.taken
		c.mu.Unlock()
		if taken {
			select {
			case a := <-q.done:
				return a
			case <-ctx.Done():
				return answer{err: ctx.Err()}
			}
		}
		select {
		case a := <-q.done:
			return a
		case c.slots <- struct{}{}:
			// A free slot: send what is queued, this call's statement with
			// it unless another batch took it meanwhile.
			if batch := c.take(); len(batch) > 0 {
				go c.send(batch)
			} else {
				<-c.slots
			}
		case <-ctx.Done():
			c.mu.Lock()
			defer c.mu.Unlock()
			if !q.taken {
				c.queue = slices.DeleteFunc(c.queue, func(other *queued) bool { return other == q })
			}
			return answer{err: ctx.Err()}
		}
	}
}

// take removes up to maxBatch statements from the queue, in key order.
func (c *Coalescer) take() []*queued {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.queue), maxBatch)
	batch := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	for _, q := range batch {
		q.taken = true
	}
	slices.SortStableFunc(batch, func(a, b *queued) int { return strings.Compare(a.order, b.order) })
	return batch
}

// send runs batch and answers each of its statements, then frees its slot.
func (c *Coalescer) send(batch []*queued) {
	defer func() { <-c.slots }()
	ctx, cancel := whileAnyWaits(batch)
	defer cancel()
	alone := func(q *queued) answer {
		value, err := q.scan(c.pool.QueryRow(ctx, q.checkedSQL, q.args...))
		return answer{value, err}
	}
	if len(batch) == 1 {
		batch[0].done <- alone(batch[0])
		return
	}
	b := &pgx.Batch{}
	for _, q := range batch {
		b.Queue(q.checkedSQL, q.args...)
	}
	results := c.pool.SendBatch(ctx, b)
	answers := make([]answer, len(batch))
	for i, q := range batch {
		answers[i].value, answers[i].err = q.scan(results.QueryRow())
	}
	// The statements' answers hold only once the batch has committed.
	closeErr := results.Close()
	var refused *pgconn.PgError
	if errors.As(closeErr, &refused) || slices.ContainsFunc(answers, func(a answer) bool { return errors.As(a.err, &refused) }) {
		// The server rolled the whole batch back: ask again, one at a time.
		for _, q := range batch {
			q.done <- alone(q)
		}
		return
	}
	for i, q := range batch {
		if answers[i].err == nil && closeErr != nil {
			answers[i] = answer{err: closeErr}
		}
		q.done <- answers[i]
	}
}

// whileAnyWaits is a context that ends once every caller in batch has
// stopped waiting, with the first caller's values (its trace).
func whileAnyWaits(batch []*queued) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	var mu sync.Mutex
	waiting := len(batch)
	stops := make([]func() bool, len(batch))
	for i, q := range batch {
		stops[i] = context.AfterFunc(q.ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			if waiting--; waiting == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// Hold takes every batch slot of c, so that the statements sent meanwhile
// queue up, and returns the function that frees the slots: the queued
// statements then go out together. For tests.
func (c *Coalescer) Hold() (release func()) {
	for range cap(c.slots) {
		c.slots <- struct{}{}
	}
	return func() {
		for range cap(c.slots) {
			<-c.slots
		}
	}
}

// Queued is how many statements wait for a batch. For tests.
func (c *Coalescer) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}
