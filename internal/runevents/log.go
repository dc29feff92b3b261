package runevents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The kinds of event a run's log holds.
const (
	TurnStarted      = "turn_started"
	TurnFinished     = "turn_finished" // an attempt of a turn ended: its outcome, and the reply's text
	TextDelta        = "text_delta"
	AttemptDiscarded = "attempt_discarded" // the text an attempt streamed is void: it failed part-way
	ToolStarted      = "tool_started"
	ToolFinished     = "tool_finished" // an attempt of a tool call ended: its outcome and output
	Parked           = "parked"
	Released         = "released"
	QuotaWait        = "quota_wait"
	AwaitingApproval = "awaiting_approval"
	ApprovalDecided  = "approval_decided"
	Escalated        = "escalated"
	Resumed          = "resumed"
	CompensationStep = "compensation_step"
	RunFinished      = "run_finished"
	Queued           = "queued"   // the run waits in its account's admission queue: its place and why
	Admitted         = "admitted" // the run left the queue: its first turn follows
	// A wait for a person (an approval, an escalation) reminds each
	// remind_every while it waits, and says so when its timeout passes:
	// the call, the tool, the deadline and the action taken
	// (wire.WaitEvent is the data).
	ApprovalReminder   = "approval_reminder"
	ApprovalTimedOut   = "approval_timed_out"
	EscalationReminder = "escalation_reminder"
	EscalationTimedOut = "escalation_timed_out"
)

// Channel is the Postgres channel a publish notifies, with the run's
// workflow ID as the payload.
const Channel = "agentsaga_run_events"

// Event is one entry of a run's log.
type Event struct {
	// Seq is the event's place in its run's log, from 1; set by the log.
	Seq int64 `json:"seq"`
	// Key names the event within its run: a publish of a key the log holds
	// already is skipped.
	Key  string `json:"key"`
	Kind string `json:"kind"`
	// CallKey is the idempotency key of the call the event is of, if any.
	CallKey string          `json:"call_key,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	// At is when the log stored it; set by the log.
	At time.Time `json:"at"`
}

// Log is the event logs of every run, in one Postgres database.
type Log struct{ pool *pgxpool.Pool }

// New returns the log kept in pool's database (migrated to 00024 or later).
func New(pool *pgxpool.Pool) *Log { return &Log{pool: pool} }

// Publish appends events to workflowID's log in one statement, in their
// order, skipping those whose key the log holds already, and wakes the
// run's readers. It returns how many were new.
func (l *Log) Publish(ctx context.Context, workflowID string, events ...Event) (int64, error) {
	if len(events) == 0 {
		return 0, nil
	}
	keys := make([]string, len(events))
	kinds := make([]string, len(events))
	calls := make([]string, len(events))
	data := make([][]byte, len(events))
	for i, e := range events {
		if e.Key == "" || e.Kind == "" {
			return 0, fmt.Errorf("runevents: publish to %s: event %d has no key or no kind (key %q, kind %q)", workflowID, i, e.Key, e.Kind)
		}
		if len(e.Data) > 0 && !json.Valid(e.Data) {
			return 0, fmt.Errorf("runevents: publish %s of %s: its data is not JSON", e.Key, workflowID)
		}
		keys[i], kinds[i], calls[i] = e.Key, e.Kind, e.CallKey
		if len(e.Data) > 0 {
			data[i] = e.Data
		}
	}
	var added int64
	err := l.pool.QueryRow(ctx, `SELECT agentsaga_publish_events($1, $2, $3, $4, $5::jsonb[])`,
		workflowID, keys, kinds, calls, data).Scan(&added)
	if err != nil {
		return 0, fmt.Errorf("runevents: publish %d events to %s: %w", len(events), workflowID, err)
	}
	return added, nil
}

// Read returns up to limit events of workflowID's log that follow seq
// after, in order. The events a call's claim and settle appended (its
// start and end, migration 00027) are numbered into the log by the read
// itself, or by the run's next publish, whichever comes first.
func (l *Log) Read(ctx context.Context, workflowID string, after int64, limit int) ([]Event, error) {
	if limit <= 0 {
		return nil, errors.New("runevents: read: limit must be positive")
	}
	rows, err := l.pool.Query(ctx, `SELECT * FROM agentsaga_read_events($1, $2, $3)`, workflowID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("runevents: read %s after %d: %w", workflowID, after, err)
	}
	defer rows.Close()
	var events []Event
	for rows.Next() {
		var e Event
		var data []byte
		if err := rows.Scan(&e.Seq, &e.Key, &e.Kind, &e.CallKey, &data, &e.At); err != nil {
			return nil, fmt.Errorf("runevents: read %s after %d: %w", workflowID, after, err)
		}
		e.Data = data
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("runevents: read %s after %d: %w", workflowID, after, err)
	}
	return events, nil
}

// Head returns the seq of the last event numbered into workflowID's log (0
// when none is): a reader that starts after it misses nothing that comes.
func (l *Log) Head(ctx context.Context, workflowID string) (int64, error) {
	var head int64
	err := l.pool.QueryRow(ctx, `SELECT coalesce((SELECT last_seq FROM run_event_heads WHERE workflow_id = $1), 0)`, workflowID).Scan(&head)
	if err != nil {
		return 0, fmt.Errorf("runevents: head of %s: %w", workflowID, err)
	}
	return head, nil
}
