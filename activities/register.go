package activities

import (
	"github.com/agentsaga/agentsaga/agentsagatype"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
)

// Register registers the methods of acts (an *Activities or a
// *Reconciliation) on r under NamePrefix. With legacyNames it registers
// them under their bare names too, for the runs in flight that began on a
// build from before the prefix (workflows/versions.go,
// namespaced-activities): a worker that has run agentsaga before needs
// them until those runs have ended.
func Register(r worker.ActivityRegistry, acts any, legacyNames bool) {
	r.RegisterActivityWithOptions(acts, activity.RegisterOptions{Name: agentsagatype.NamePrefix})
	if legacyNames {
		r.RegisterActivity(acts)
	}
}
