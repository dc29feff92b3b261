package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// RequestApproval records a call that waits for a human, under its key,
// before anything is sent (ARCHITECTURE.md decision 14).
func (a *Activities) RequestApproval(ctx context.Context, req agentsagatype.ApprovalRequest) (agentsagatype.Approval, error) {
	approval, err := a.Ledger.RequestApproval(ctx, req)
	if err == nil {
		a.publish(ctx, approval.WorkflowID, approval.Key+"/approval", runevents.AwaitingApproval, approval.Key, approval)
	}
	return approval, err
}

// DecideApproval records a human's decision (or the timeout's). A request
// another decision settled first fails for good, naming who decided, so
// the second operator's Update is told; so does a key with no request.
func (a *Activities) DecideApproval(ctx context.Context, d wire.ApprovalDecision) (agentsagatype.Approval, error) {
	approval, err := a.Ledger.DecideApproval(ctx, d.Key, d.Status(), d.By, d.Reason)
	if err == nil {
		a.publish(ctx, approval.WorkflowID, approval.Key+"/decided", runevents.ApprovalDecided, approval.Key, approval)
	}
	switch {
	case errors.Is(err, ledgerdb.ErrDecided):
		return approval, temporal.NewNonRetryableApplicationError(err.Error(), agentsagatype.ErrTypeApprovalDecided, nil)
	case errors.Is(err, ledgerdb.ErrNotFound):
		// No request under the key: retrying cannot make one appear.
		return approval, temporal.NewNonRetryableApplicationError(err.Error(), agentsagatype.ErrTypeNotFound, nil)
	}
	return approval, err
}

// HoldLimit counts a call against its run's limit on a tool's arguments,
// or refuses it, atomically across the fleet (ledgerdb.Store.HoldLimit).
func (a *Activities) HoldLimit(ctx context.Context, hold wire.LimitHold) (wire.LimitHeld, error) {
	return a.Ledger.HoldLimit(ctx, hold)
}
