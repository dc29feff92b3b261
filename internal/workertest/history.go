package workertest

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"
)

// History reads the whole history of one execution.
func History(ctx context.Context, c client.Client, id, runID string) (*historypb.History, error) {
	history := &historypb.History{}
	iter := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		event, err := iter.Next()
		if err != nil {
			return nil, fmt.Errorf("workertest: history of %s (run %s): %w", id, runID, err)
		}
		history.Events = append(history.Events, event)
	}
	return history, nil
}

// Executions reads the histories of a run's chain of executions, from
// runID through every continue-as-new.
func Executions(ctx context.Context, c client.Client, id, runID string) ([]*historypb.History, error) {
	var chain []*historypb.History
	for runID != "" {
		history, err := History(ctx, c, id, runID)
		if err != nil {
			return nil, err
		}
		chain = append(chain, history)
		runID = ""
		if last := history.Events[len(history.Events)-1]; last.GetWorkflowExecutionContinuedAsNewEventAttributes() != nil {
			runID = last.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
		}
	}
	return chain, nil
}

// WorkflowTaskBuilds lists, in order, the build ID of the worker that
// completed each workflow task ("" for an unversioned worker).
func WorkflowTaskBuilds(events []*historypb.HistoryEvent) []string {
	var builds []string
	for _, event := range events {
		if attrs := event.GetWorkflowTaskCompletedEventAttributes(); attrs != nil {
			build := attrs.GetDeploymentVersion().GetBuildId()
			if build == "" {
				_, build, _ = strings.Cut(attrs.GetWorkerDeploymentVersion(), ".")
			}
			builds = append(builds, build)
		}
	}
	return builds
}

// FailedWorkflowTasks counts an execution's failed workflow tasks, and
// among them those that failed with a non-determinism error: the
// workflow code that replayed the history took another path.
func FailedWorkflowTasks(events []*historypb.HistoryEvent) (failed, nondeterministic int) {
	for _, event := range events {
		if attrs := event.GetWorkflowTaskFailedEventAttributes(); attrs != nil {
			failed++
			if attrs.GetCause() == enumspb.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR ||
				strings.Contains(strings.ToLower(attrs.GetFailure().GetMessage()), "nondeterministic") {
				nondeterministic++
			}
		}
	}
	return failed, nondeterministic
}

// RecordedVersion is the version an execution recorded for changeID with
// workflow.GetVersion, or DefaultVersion when it recorded none (it began
// on code without the change).
func RecordedVersion(events []*historypb.HistoryEvent, changeID string) (workflow.Version, error) {
	versions, err := RecordedVersions(events)
	if err != nil {
		return 0, err
	}
	if version, ok := versions[changeID]; ok {
		return version, nil
	}
	return workflow.DefaultVersion, nil
}

// RecordedVersions are the versions an execution recorded with
// workflow.GetVersion, by change ID (the first marker of each).
func RecordedVersions(events []*historypb.HistoryEvent) (map[string]workflow.Version, error) {
	dc := converter.GetDefaultDataConverter()
	versions := map[string]workflow.Version{}
	for _, event := range events {
		marker := event.GetMarkerRecordedEventAttributes()
		if marker == nil || marker.GetMarkerName() != "Version" {
			continue
		}
		var id string
		if err := dc.FromPayloads(marker.GetDetails()["change-id"], &id); err != nil {
			return nil, fmt.Errorf("workertest: version marker %d: %w", event.GetEventId(), err)
		}
		if _, seen := versions[id]; seen {
			continue
		}
		var version workflow.Version
		if err := dc.FromPayloads(marker.GetDetails()["version"], &version); err != nil {
			return nil, fmt.Errorf("workertest: version marker %d: %w", event.GetEventId(), err)
		}
		versions[id] = version
	}
	return versions, nil
}

// GiveUps counts the give-ups (fencing a failed call's key) an execution
// scheduled, and says whether one was scheduled while an earlier call of
// its turn was still running: the mark of give-ups-together. The old path
// gave calls up in call order, each once every earlier call of the turn
// had settled and been given up, so it never gives up ahead.
func GiveUps(events []*historypb.HistoryEvent) (scheduled int, ahead bool) {
	running := map[int64]string{} // scheduled event ID -> activity ID
	for _, event := range events {
		if attrs := event.GetActivityTaskScheduledEventAttributes(); attrs != nil {
			id := attrs.GetActivityId()
			forward, isGiveUp := strings.CutSuffix(id, "/give-up")
			if !isGiveUp {
				running[event.GetEventId()] = id
				continue
			}
			scheduled++
			turn, call, ok := turnAndCall(forward)
			for _, other := range running {
				if otherTurn, otherCall, isCall := turnAndCall(other); ok && isCall && otherTurn == turn && otherCall < call {
					ahead = true
				}
			}
		}
		for _, closed := range []int64{
			event.GetActivityTaskCompletedEventAttributes().GetScheduledEventId(),
			event.GetActivityTaskFailedEventAttributes().GetScheduledEventId(),
			event.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId(),
			event.GetActivityTaskCanceledEventAttributes().GetScheduledEventId(),
		} {
			delete(running, closed)
		}
	}
	return scheduled, ahead
}

// turnAndCall splits a tool call's activity ID, step-001-call-2-lookup,
// into its turn (step-001) and its place in the turn (2).
func turnAndCall(activityID string) (turn string, call int, ok bool) {
	turn, rest, found := strings.Cut(activityID, "-call-")
	if !found {
		return "", 0, false
	}
	number, _, _ := strings.Cut(rest, "-")
	call, err := strconv.Atoi(number)
	return turn, call, err == nil
}
