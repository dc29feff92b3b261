package activities

import (
	"fmt"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/wire"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
)

// Register registers the activities of acts (an *Activities or a
// *Reconciliation) on r, each under NamePrefix and its name
// (wire.Activity*). With legacyNames it registers them under their bare
// names too, for the runs in flight that began on a build from before the
// prefix (workflows/versions.go, namespaced-activities): a worker that has
// run agentsaga before needs them until those runs have ended.
//
// The activities are unexported methods: their inputs are the engine's
// own (internal/wire), and a workflow reaches them by name, never by
// calling them, so they are no part of the public API.
func Register(r worker.ActivityRegistry, acts any, legacyNames bool) {
	var named map[string]any
	switch a := acts.(type) {
	case *Activities:
		named = a.named()
	case *Reconciliation:
		named = a.named()
	default:
		panic(fmt.Sprintf("activities: Register takes an *Activities or a *Reconciliation, not %T", acts))
	}
	for name, fn := range named {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: agentsagatype.NamePrefix + name})
		if legacyNames {
			r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
		}
	}
}

// named is the engine's activities, by name.
func (a *Activities) named() map[string]any {
	return map[string]any{
		wire.ActivityAdmitRun:           a.admitRun,
		wire.ActivityCallModel:          a.callModel,
		wire.ActivityCallTool:           a.callTool,
		wire.ActivityCloseRun:           a.closeRun,
		wire.ActivityDecideApproval:     a.decideApproval,
		wire.ActivityGiveUpCall:         a.giveUpCall,
		wire.ActivityHoldLimit:          a.holdLimit,
		wire.ActivityListMCPTools:       a.listMCPTools,
		wire.ActivityPublishWaitEvent:   a.publishWaitEvent,
		wire.ActivityReadResult:         a.readResult,
		wire.ActivityRecordRunFinish:    a.recordRunFinish,
		wire.ActivityRecordRunStart:     a.recordRunStart,
		wire.ActivityRecordedApproval:   a.recordedApproval,
		wire.ActivityRequestApproval:    a.requestApproval,
		wire.ActivityRollbackPlan:       a.rollbackPlan,
		wire.ActivitySetRunStatus:       a.setRunStatus,
		wire.ActivitySettleCompensation: a.settleCompensation,
	}
}

// named is the reconciler's activities, by name.
func (r *Reconciliation) named() map[string]any {
	return map[string]any{
		wire.ActivityFindAbandonedRuns: r.findAbandonedRuns,
		wire.ActivityFinishSubRuns:     r.finishSubRuns,
		wire.ActivityReadTerminatedRun: r.readTerminatedRun,
		wire.ActivityStartRollback:     r.startRollback,
	}
}
