package worker

import (
	"fmt"

	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The two ways a versioned worker's runs can live through a deploy.
const (
	// versioningAutoUpgrade moves a run to the deployment's current build
	// at its next workflow task, a resume after days of waiting included.
	// It is safe because every change to the commands a workflow emits
	// goes behind workflow.GetVersion, and the replay corpus checks it.
	versioningAutoUpgrade = "auto-upgrade"
	// versioningPinned keeps a run on the build that started it until it
	// ends: that build's workers must keep running until its runs drain.
	versioningPinned = "pinned"
)

// Deployment puts a worker under Temporal's Worker Versioning: it polls as
// build BuildID of the worker deployment Name, and runs only the runs the
// server routes to that build. The zero value is an unversioned worker, as
// `agentsaga dev` runs.
type Deployment struct {
	Name    string
	BuildID string
	// Versioning is versioningAutoUpgrade (the default when empty) or
	// versioningPinned, for the runs this build starts.
	Versioning string
}

// Versioned says whether the worker runs under Worker Versioning.
func (d Deployment) versioned() bool { return d.Name != "" || d.BuildID != "" }

// Validate names what is wrong with the flags that made d.
func (d Deployment) validate() error {
	if !d.versioned() {
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
	case "", versioningAutoUpgrade:
		return workflow.VersioningBehaviorAutoUpgrade, nil
	case versioningPinned:
		return workflow.VersioningBehaviorPinned, nil
	}
	return workflow.VersioningBehaviorUnspecified, fmt.Errorf("worker: --versioning %q is neither %q nor %q", d.Versioning, versioningAutoUpgrade, versioningPinned)
}

// options is what the Temporal worker needs to poll as this build.
func (d Deployment) options() (sdkworker.DeploymentOptions, error) {
	if err := d.validate(); err != nil || !d.versioned() {
		return sdkworker.DeploymentOptions{}, err
	}
	behavior, _ := d.behavior()
	return sdkworker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   sdkworker.WorkerDeploymentVersion{DeploymentName: d.Name, BuildID: d.BuildID},
		DefaultVersioningBehavior: behavior,
	}, nil
}
