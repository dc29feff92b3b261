package bench

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

// FairnessPhases splits B's time to first turn by where it went, read
// from each B run's history: the Start call until the server recorded the
// run, the wait for its first workflow task, that task (its local
// activities included), the model call's wait in the activity queue for a
// worker's slot, and from the activity's start to the provider's first
// request. Each is percentiles over B's runs, in ms; they explain the
// total, they do not add up to its percentiles.
type FairnessPhases struct {
	Start          Percentiles `json:"start"`
	WorkflowQueued Percentiles `json:"workflow_task_queued"`
	WorkflowTask   Percentiles `json:"workflow_task"`
	ActivityQueued Percentiles `json:"activity_queued"`
	ToProvider     Percentiles `json:"activity_to_provider"`
}

// fairnessPhases reads each run's history up to its first activity's
// start. starts are the times just before each Start; firsts the
// provider's first request of each run.
func fairnessPhases(ctx context.Context, c client.Client, ids []string, starts, firsts []time.Time) (FairnessPhases, error) {
	var start, wfQueued, wfTask, actQueued, toProvider []float64
	for i, id := range ids {
		var began, wftScheduled, wftStarted, wftDone, actScheduled, actStarted time.Time
		iter := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() && actStarted.IsZero() {
			e, err := iter.Next()
			if err != nil {
				return FairnessPhases{}, fmt.Errorf("history of %s: %w", id, err)
			}
			at := e.GetEventTime().AsTime()
			// The first of each: a later workflow task or activity is
			// after B's first turn.
			first := func(t *time.Time) {
				if t.IsZero() {
					*t = at
				}
			}
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				began = at
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
				first(&wftScheduled)
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
				first(&wftStarted)
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				first(&wftDone)
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				first(&actScheduled)
			case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				actStarted = at
			}
		}
		if actStarted.IsZero() || wftDone.IsZero() {
			return FairnessPhases{}, fmt.Errorf("history of %s: no workflow task and activity started", id)
		}
		start = append(start, ms(began.Sub(starts[i])))
		wfQueued = append(wfQueued, ms(wftStarted.Sub(wftScheduled)))
		wfTask = append(wfTask, ms(wftDone.Sub(wftStarted)))
		actQueued = append(actQueued, ms(actStarted.Sub(actScheduled)))
		toProvider = append(toProvider, ms(firsts[i].Sub(actStarted)))
	}
	return FairnessPhases{Start: percentiles(start), WorkflowQueued: percentiles(wfQueued), WorkflowTask: percentiles(wfTask),
		ActivityQueued: percentiles(actQueued), ToProvider: percentiles(toProvider)}, nil
}
