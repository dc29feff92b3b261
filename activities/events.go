package activities

import (
	"context"
	"encoding/json"
	"strings"

	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// What a run does is published to its event log (internal/runevents) by
// the activities that do it, for the clients that watch the run live; the
// workflow's history does not change. A publish is at least once (an
// attempt that publishes and dies publishes again on the next) and the log
// stores each event once, by its key: the call's idempotency key and what
// the event is of it. A publish that fails costs the watchers, never the
// run: it is logged and the activity goes on.

// publish appends one event to workflowID's log.
func (a *Activities) publish(ctx context.Context, workflowID, key, kind, callKey string, data any) {
	raw, err := json.Marshal(data)
	if err == nil {
		_, err = runevents.New(a.Ledger.Pool()).Publish(ctx, workflowID,
			runevents.Event{Key: key, Kind: kind, CallKey: callKey, Data: raw})
	}
	if err != nil {
		activity.GetLogger(ctx).Warn("could not publish a run event", "workflow", workflowID, "event", key, "error", err)
	}
}

// publishText publishes a reply's text as the attempt's text deltas.
func (a *Activities) publishText(ctx context.Context, workflowID, callKey string, attempt int, text string) {
	b := runevents.New(a.Ledger.Pool()).NewBatcher(ctx, workflowID, callKey, attempt)
	b.Add(text)
	if err := b.Flush(); err != nil {
		activity.GetLogger(ctx).Warn("could not publish a reply's text", "workflow", workflowID, "call", callKey, "error", err)
	}
}

// statusEvent is the kind of event a status the run passes through while
// it waits makes, by what the status says.
func statusEvent(status, detail string) string {
	switch {
	case status == agentsagatype.RunEscalated:
		return runevents.Escalated
	case detail == "":
		return runevents.Released // no longer waiting: resumed, or back from a wait
	case strings.Contains(detail, "quota"), strings.Contains(detail, "spend cap"):
		return runevents.QuotaWait
	default:
		return runevents.Parked
	}
}

// eventData is what a status or an ending says, for a watcher.
type eventData struct {
	Status string `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`
}
