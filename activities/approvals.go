package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/internal/runevents"
	"github.com/agentsaga/agentsaga/internal/wire"
)

// requestApproval records a call that waits for a human, under its key,
// before anything is sent (ARCHITECTURE.md decision 14).
func (a *Activities) requestApproval(ctx context.Context, req agentsagatype.ApprovalRequest) (agentsagatype.Approval, error) {
	approval, err := a.Ledger.RequestApproval(ctx, req)
	if err == nil {
		approval.Deadline, approval.OnTimeout = req.Deadline, req.OnTimeout // the run's, not the ledger's
		a.publish(ctx, approval.WorkflowID, approval.Key+"/approval", runevents.AwaitingApproval, approval.Key, approval)
	}
	return approval, err
}

// decideApproval records a human's decision (or the timeout's). A request
// another decision settled first fails for good, naming who decided (or
// the fork that closed it), so the second operator's Update is told; so
// does a key with no request.
func (a *Activities) decideApproval(ctx context.Context, d wire.ApprovalDecision) (agentsagatype.Approval, error) {
	approval, err := a.Ledger.DecideApproval(ctx, d.Key, d.Status(), d.By, d.Reason)
	if err == nil {
		a.publish(ctx, approval.WorkflowID, approval.Key+"/decided", runevents.ApprovalDecided, approval.Key, approval)
	}
	switch {
	case errors.Is(err, ledgerdb.ErrSuperseded) && d.TimedOut:
		// The source of a fork timing its wait out: the fork closed the
		// request, and there is nothing to record (the source's claims
		// are fenced, so the call is never sent either way).
		return approval, nil
	case errors.Is(err, ledgerdb.ErrDecided):
		return approval, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeApprovalDecided, nil)
	case errors.Is(err, ledgerdb.ErrNotFound):
		// No request under the key: retrying cannot make one appear.
		return approval, temporal.NewNonRetryableApplicationError(err.Error(), wire.ErrTypeNotFound, nil)
	}
	return approval, err
}

// publishWaitEvent publishes a wait for a person's reminder, or its
// timeout, to the run's event log, under the event's key: a retried
// attempt stores it once. Unlike the events the activities publish beside
// a record, it fails when the log cannot be written, so that its retries
// tell people.
func (a *Activities) publishWaitEvent(ctx context.Context, e wire.WaitEvent) error {
	if e.Of == wire.WaitApproval && e.CallKey != "" {
		// A fork closed the request (the source waits on, unaware): it
		// waits for nobody, and nobody is to be reminded of it. A failed
		// read is left to the publish, which meets the same database.
		if approval, err := a.Ledger.GetApproval(ctx, e.CallKey); err == nil && approval.Status == agentsagatype.ApprovalSuperseded {
			return nil
		}
	}
	kind := map[[2]bool]string{
		{true, false}:  runevents.ApprovalReminder,
		{true, true}:   runevents.ApprovalTimedOut,
		{false, false}: runevents.EscalationReminder,
		{false, true}:  runevents.EscalationTimedOut,
	}[[2]bool{e.Of == wire.WaitApproval, e.TimedOut}]
	raw, err := json.Marshal(e)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), "BadEvent", nil)
	}
	_, err = runevents.New(a.Ledger.Pool()).Publish(ctx, e.WorkflowID, runevents.Event{Key: e.Key, Kind: kind, CallKey: e.CallKey, Data: raw})
	return err
}

// holdLimit counts a call against its run's limit on a tool's arguments,
// or refuses it, atomically across the fleet (ledgerdb.Store.HoldLimit).
func (a *Activities) holdLimit(ctx context.Context, hold wire.LimitHold) (wire.LimitHeld, error) {
	return a.Ledger.HoldLimit(ctx, hold)
}

// recordedApproval records a replay's approval request and decides it as
// the recording did: the decision recorded for a call of the same tool
// with the same arguments (the first one the replay has not used yet), or
// a denial when the recording holds none. No human is asked.
func (a *Activities) recordedApproval(ctx context.Context, r wire.RecordedApproval) (agentsagatype.Approval, error) {
	req := r.Request
	var recorded []agentsagatype.Approval
	source, err := a.sourceRun(ctx, r.Recording, req.WorkflowID)
	denial := "no decision recorded in " + source
	var unrecorded *temporal.ApplicationError
	switch {
	case errors.As(err, &unrecorded) && unrecorded.Type() == wire.ErrTypeNotRecorded:
		// A sub-agent the recording never started has no decisions: the
		// call is denied, saying why.
		denial = unrecorded.Error()
	case err != nil:
		return agentsagatype.Approval{}, err
	default:
		if recorded, err = a.Ledger.RunApprovals(ctx, source); err != nil {
			return agentsagatype.Approval{}, err
		}
	}
	mine, err := a.Ledger.RunApprovals(ctx, req.WorkflowID)
	if err != nil {
		return agentsagatype.Approval{}, err
	}
	want := wire.CanonicalJSON(req.Arguments)
	same := func(x agentsagatype.Approval) bool {
		return x.Tool == req.Tool && wire.CanonicalJSON(x.Arguments) == want
	}
	used := 0
	for _, m := range mine {
		if m.Key != req.Key && same(m) {
			used++
		}
	}
	status, by, reason := agentsagatype.ApprovalDenied, "replay", denial
	for _, x := range recorded {
		if !same(x) || x.Status == agentsagatype.ApprovalAwaiting {
			continue
		}
		if used > 0 {
			used--
			continue
		}
		if x.Status == agentsagatype.ApprovalApproved || x.Status == agentsagatype.ApprovalDenied {
			status, by, reason = x.Status, "recording ("+x.DecidedBy+")", x.Reason
		} else {
			reason = fmt.Sprintf("%s in %s (%s)", x.Status, source, x.Reason)
		}
		break
	}
	if reason == "" {
		reason = "as recorded in " + source
	}
	if _, err := a.Ledger.RequestApproval(ctx, req); err != nil {
		return agentsagatype.Approval{}, err
	}
	approval, err := a.Ledger.DecideApproval(ctx, req.Key, status, by, reason)
	if errors.Is(err, ledgerdb.ErrDecided) {
		// A retried attempt: the decision it made stands.
		return a.Ledger.GetApproval(ctx, req.Key)
	}
	return approval, err
}
