package worker

import (
	"fmt"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The two ways a versioned worker's runs can live through a deploy.
const (
	// VersioningAutoUpgrade moves a run to the deployment's current build
	// at its next workflow task, a resume after days of waiting included.
	// It is safe because every change to the commands a workflow emits
	// goes behind workflow.GetVersion, and the replay corpus checks it.
	VersioningAutoUpgrade = "auto-upgrade"
	// VersioningPinned keeps a run on the build that started it until it
	// ends: that build's workers must keep running until its runs drain.
	VersioningPinned = "pinned"
)

// Deployment puts a worker under Temporal's Worker Versioning: it polls as
// build BuildID of the worker deployment Name, and runs only the runs the
// server routes to that build. The zero value is an unversioned worker, as
// `agentsaga dev` runs.
type Deployment struct {
	Name    string
	BuildID string
	// Versioning is VersioningAutoUpgrade (the default when empty) or
	// VersioningPinned, for the runs this build starts.
	Versioning string
}

// Versioned says whether the worker runs under Worker Versioning.
func (d Deployment) Versioned() bool { return d.Name != "" || d.BuildID != "" }

// Validate names what is wrong with the flags that made d.
func (d Deployment) Validate() error {
	if !d.Versioned() {
		if d.Versioning != "" {
			return fmt.Errorf("worker: --versioning %s needs --deployment and --build-id", d.Versioning)
		}
		return nil
	}
	if d.Name == "" || d.BuildID == "" {
		return fmt.Errorf("worker: a versioned worker needs both --deployment (got %q) and --build-id (got %q)", d.Name, d.BuildID)
	}
	if _, err := d.behavior(); err != nil {
		return err
	}
	return nil
}

func (d Deployment) behavior() (workflow.VersioningBehavior, error) {
	switch d.Versioning {
	case "", VersioningAutoUpgrade:
		return workflow.VersioningBehaviorAutoUpgrade, nil
	case VersioningPinned:
		return workflow.VersioningBehaviorPinned, nil
	}
	return workflow.VersioningBehaviorUnspecified, fmt.Errorf("worker: --versioning %q is neither %q nor %q", d.Versioning, VersioningAutoUpgrade, VersioningPinned)
}

// options is what the Temporal worker needs to poll as this build.
func (d Deployment) options() (sdkworker.DeploymentOptions, error) {
	if err := d.Validate(); err != nil || !d.Versioned() {
		return sdkworker.DeploymentOptions{}, err
	}
	behavior, _ := d.behavior()
	return sdkworker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   sdkworker.WorkerDeploymentVersion{DeploymentName: d.Name, BuildID: d.BuildID},
		DefaultVersioningBehavior: behavior,
	}, nil
}
