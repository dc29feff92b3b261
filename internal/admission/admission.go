// Package admission owns the loop every worker with a Temporal client runs
// beside its pollers: it listens for the ledger's admission notifications
// (a run ended, a call settled below its reservation, a cap or a limit
// changed), runs an admission pass over the queues that may move, and
// tells each run a pass admitted, with the signal its workflow waits for.
// Any number of workers run it: the passes of one root account are
// serialized in Postgres, and a run told twice asks the ledger once more.
package admission

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/internal/ledgerdb"
)

// Sweep is how often the loop looks without being notified: for runs
// admitted by a process that died before it told them, and for a lost
// connection's notifications. Room that frees is notified at once; a cap
// that resets by itself wakes the loop at its reset.
const Sweep = 10 * time.Second

// signalBatch bounds the runs told per round.
const signalBatch = 200

// Loop runs until ctx ends. signal is the workflow signal a queued run
// waits for.
func Loop(ctx context.Context, db *ledgerdb.Store, c client.Client, signal string, logger *slog.Logger) {
	l := &loop{db: db, c: c, signal: signal, logger: logger}
	for ctx.Err() == nil {
		if err := l.listen(ctx); err != nil && ctx.Err() == nil {
			logger.Warn("admission: the loop lost its connection; it listens again in a second", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

type loop struct {
	db     *ledgerdb.Store
	c      client.Client
	signal string
	logger *slog.Logger
}

// listen holds a connection of its own (not one of the pool's, which the
// calls need) LISTENing on the admission channel, and runs a round on
// every notification, at the next reset and every Sweep.
func (l *loop) listen(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, l.db.Pool().Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		closing, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(closing)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+ledgerdb.AdmissionChannel); err != nil {
		return err
	}
	wake := time.Now()
	for {
		if d := time.Until(wake); d > 0 {
			waitCtx, cancel := context.WithTimeout(ctx, d)
			_, err := conn.WaitForNotification(waitCtx)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
		frees, err := l.round(ctx)
		if err != nil && ctx.Err() == nil {
			l.logger.Warn("admission: a round failed; the next one retries", "error", err)
		}
		wake = time.Now().Add(Sweep)
		if !frees.IsZero() && frees.Before(wake) {
			wake = frees
		}
	}
}

// round runs a pass over every root with runs queued, then tells the runs
// admitted (by this pass or any other) that they are. It returns when a
// cap next frees room by itself.
func (l *loop) round(ctx context.Context) (time.Time, error) {
	roots, frees, err := l.db.QueuedRoots(ctx)
	if err != nil {
		return time.Time{}, err
	}
	for _, root := range roots {
		if _, err := l.db.AdmitQueued(ctx, root); err != nil {
			return frees, err
		}
	}
	for {
		ids, err := l.db.UnsignalledAdmissions(ctx, signalBatch)
		if err != nil || len(ids) == 0 {
			return frees, err
		}
		for _, id := range ids {
			err := l.c.SignalWorkflow(ctx, id, "", l.signal, nil)
			var gone *serviceerror.NotFound
			if err != nil && !errors.As(err, &gone) {
				// Left unsignalled: the next round tries again, and the run
				// asks the ledger by itself within its recheck.
				l.logger.Warn("admission: could not tell a run it is admitted", "run", id, "error", err)
				ids = ids[:0]
				break
			}
		}
		if len(ids) == 0 {
			return frees, nil
		}
		if err := l.db.MarkSignalled(ctx, ids); err != nil {
			return frees, err
		}
		if len(ids) < signalBatch {
			return frees, nil
		}
	}
}
