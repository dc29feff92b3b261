package wire

import (
	"github.com/agentsaga/agentsaga/agentsagatype"
)

// CompensationRequest pairs a forward action with the tool that undoes it.
type CompensationRequest struct {
	Tool              string `json:"tool"`
	ArgumentsTemplate string `json:"arguments_template"`
}

// RollbackPlan is what a run's rollback walks: its compensations and its
// sub-agents', newest first, and the actions that cannot be undone.
type RollbackPlan struct {
	Stack        []agentsagatype.Compensation `json:"stack"`
	Irreversible []agentsagatype.Action       `json:"irreversible,omitempty"`
}
