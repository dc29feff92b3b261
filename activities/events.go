package activities

import (
	"context"
	"encoding/json"
	"strings"

	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/keyed"
	"github.com/agentsaga/agentsaga/internal/runevents"
)

// What a run passes through (its waits, its approvals, its compensation
// steps) and how it ended are published to its event log
// (internal/runevents) by the activities that record them, for the
// clients that watch the run live; the workflow's history does not change.
// These are a few events a run, off the calls' path. A call's own start
// and end ride on its claim's and its settle's statements (migration
// 00027), so that a call keeps costing 2; a model's text streams between
// them, its first chunk at once and the rest in batches (streamText). A publish is at least once, and the
// log stores each event once, by its key. A publish that fails costs the
// watchers, never the run.

// streamText is the batcher of one model attempt's streamed text.
func (a *Activities) streamText(ctx context.Context, info activity.Info) *runevents.Batcher {
	return runevents.New(a.Ledger.Pool()).NewBatcher(ctx, info.WorkflowExecution.ID, keyed.CallKey(ctx), int(info.Attempt))
}

// publish appends one event to workflowID's log.
func (a *Activities) publish(ctx context.Context, workflowID, key, kind, callKey string, data any) {
	raw, err := json.Marshal(data)
	if err == nil {
		_, err = runevents.New(a.Ledger.Pool()).Publish(ctx, workflowID,
			runevents.Event{Key: key, Kind: kind, CallKey: callKey, Data: raw})
	}
	if err != nil && ctx.Err() == nil {
		activity.GetLogger(ctx).Warn("could not publish a run event", "workflow", workflowID, "event", key, "error", err)
	}
}

// statusEvent is the kind of event a status the run passes through while
// it waits makes, by what the status says.
func statusEvent(status, detail string) string {
	switch {
	case status == agentsagatype.RunEscalated:
		return runevents.Escalated
	case strings.HasPrefix(detail, "after "):
		return runevents.Resumed // a human answered the escalation ("after resume", "after skip")
	case detail == "":
		return runevents.Released // no longer waiting: back from a wait
	case strings.Contains(detail, "quota"), strings.Contains(detail, "spend cap"):
		return runevents.QuotaWait
	default:
		return runevents.Parked
	}
}

// statusData is what a status says, for a watcher.
type statusData struct {
	Status string `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// runFinished is a run_finished event's data: how the run ended.
type runFinished struct {
	Status      string  `json:"status"`
	Reason      string  `json:"reason"`
	Answer      string  `json:"answer,omitempty"`
	HandoffNote string  `json:"handoff_note,omitempty"`
	Steps       int     `json:"steps"`
	Tokens      int64   `json:"tokens"`
	USD         float64 `json:"usd"`
}
