package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"go.temporal.io/api/serviceerror"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
)

// maxDecisionBytes caps a decision's body: an instruction for the model
// is at most 16 KiB (workflows' maxInstruction), with room for JSON's
// escapes.
const maxDecisionBytes = 64 << 10

// decisionBody is what a decision's JSON body may hold.
type decisionBody struct {
	Message  string  `json:"message"`
	AddUSD   float64 `json:"add_usd"`
	AddSteps int     `json:"add_steps"`
	Reason   string  `json:"reason"`
}

// runDecision is one of the run's human decisions that go through the Run
// handle: which fields its body takes, and what it sends.
type runDecision struct {
	name   string
	fields []string
	send   func(ctx context.Context, run *agentsaga.Run, by string, in decisionBody) error
}

// runDecisions are resume, abort, retry and skip. A reason is recorded as
// "<key name>: <reason>", so that the ledger says who decided.
var runDecisions = []runDecision{
	{"resume", []string{"message", "add_usd", "add_steps"}, func(ctx context.Context, run *agentsaga.Run, _ string, in decisionBody) error {
		if in.Message == "" {
			return badRequest("message is required: the instruction the model reads next turn")
		}
		return run.Resume(ctx, agentsaga.ResumeInput{Message: in.Message, AddUSD: in.AddUSD, AddSteps: in.AddSteps})
	}},
	{"abort", []string{"reason"}, func(ctx context.Context, run *agentsaga.Run, by string, in decisionBody) error {
		if in.Reason == "" {
			return badRequest("reason is required: why the run is aborted")
		}
		return run.Abort(ctx, by+": "+in.Reason)
	}},
	{"retry", nil, func(ctx context.Context, run *agentsaga.Run, _ string, _ decisionBody) error {
		return run.Retry(ctx)
	}},
	{"skip", []string{"reason"}, func(ctx context.Context, run *agentsaga.Run, by string, in decisionBody) error {
		if in.Reason == "" {
			return badRequest("reason is required: why the failed compensation is skipped")
		}
		return run.Skip(ctx, by+": "+in.Reason)
	}},
}

// readDecision reads a decision's body: JSON with only the fields named,
// or nothing at all.
func readDecision(w http.ResponseWriter, r *http.Request, fields ...string) (decisionBody, error) {
	var in decisionBody
	if _, p := onlyParams(r); p != nil {
		return in, p
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxDecisionBytes))
	if err != nil {
		return in, err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return in, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return in, badRequest("the body is not a JSON object: %v", err)
	}
	for name := range raw {
		known := false
		for _, f := range fields {
			known = known || f == name
		}
		if !known {
			return in, badRequest("unknown field %q; this decision takes %v", name, fields)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&in); err != nil {
		return in, badRequest("the body does not fit the decision: %v", err)
	}
	return in, nil
}

// decide is POST /v1/runs/{id}/resume, abort, retry or skip.
func (s *Server) decide(d runDecision) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
		run, err := s.visibleRun(r.Context(), key, r.PathValue("id"))
		if err != nil {
			return err
		}
		in, err := readDecision(w, r, d.fields...)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DecisionTimeout)
		defer cancel()
		// The ledger tells a forked run's refusal (Run.Resume) before the
		// run is asked.
		if err := d.send(ctx, agentsaga.Get(s.cfg.Client, run.WorkflowID).WithLedger(s.cfg.Store), key.Name, in); err != nil {
			return s.decisionProblem(run.WorkflowID, d.name, err)
		}
		writeJSON(w, http.StatusOK, map[string]any{"run": run.WorkflowID, "decision": d.name, "by": key.Name, "accepted": true})
		return nil
	}
}

// decideApproval is POST /v1/runs/{id}/approvals/{call}/approve or deny,
// decided by the key's name.
func (s *Server) decideApproval(approve bool) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
		run, err := s.visibleRun(r.Context(), key, r.PathValue("id"))
		if err != nil {
			return err
		}
		call := r.PathValue("call")
		if p := checkID("call ID", call); p != nil {
			return p
		}
		in, err := readDecision(w, r, "reason")
		if err != nil {
			return err
		}
		handle := agentsaga.Get(s.cfg.Client, run.WorkflowID).WithLedger(s.cfg.Store)
		decide, name := handle.Approve, "approve"
		if !approve {
			decide, name = handle.Deny, "deny"
			if in.Reason == "" {
				return badRequest("reason is required to deny: the model reads it, and the ledger keeps it")
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DecisionTimeout)
		defer cancel()
		approval, err := decide(ctx, call, key.Name, in.Reason)
		var first *agentsaga.AlreadyDecidedError
		if errors.As(err, &first) {
			detail := fmt.Sprintf("call %s of run %s was already %s by %s; the first decision stands", call, run.WorkflowID, first.Decision, first.By)
			if first.Decision == agentsagatype.ApprovalSuperseded {
				detail = fmt.Sprintf("call %s of run %s: the run was forked into %s, which asks again for the call: decide the fork's request",
					call, run.WorkflowID, first.By)
			}
			p := problem(http.StatusConflict, "already-decided", "Already decided", "%s", detail)
			p.Run = run.WorkflowID
			p.FirstDecision = &firstDecision{Decision: first.Decision, By: first.By, At: first.At, Reason: first.Reason}
			return p
		}
		if err != nil {
			return s.decisionProblem(run.WorkflowID, name, err)
		}
		writeJSON(w, http.StatusOK, approval)
		return nil
	}
}

// decisionProblem says why a decision was not taken.
func (s *Server) decisionProblem(run, decision string, err error) error {
	var p *Problem
	var refused *agentsaga.RefusedError
	var gone *serviceerror.NotFound
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &refused):
		p = problem(http.StatusConflict, "decision-refused", "Decision refused", "run %s refused %s: %s", run, decision, refused.Reason)
	case errors.As(err, &gone):
		p = problem(http.StatusConflict, "decision-refused", "Decision refused", "run %s is not running, so it takes no %s", run, decision)
	case errors.Is(err, context.DeadlineExceeded):
		p = problem(http.StatusGatewayTimeout, "timeout", "Timeout",
			"run %s did not take the %s in %s: is a worker running?", run, decision, s.cfg.DecisionTimeout)
	default:
		return fmt.Errorf("api: %s run %s: %w", decision, run, err)
	}
	p.Run = run
	return p
}

// listApprovals is GET /v1/approvals: the calls waiting for a human among
// the runs the key sees, oldest first.
func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	q, p := onlyParams(r, "limit")
	if p != nil {
		return p
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("limit %q: give a number from 1 to 1000", v)
		}
		limit = n
	}
	list, err := s.db.AwaitingApprovalsUnder(r.Context(), key.Account, limit)
	if err != nil {
		return err
	}
	if list == nil {
		list = []agentsagatype.Approval{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": list})
	return nil
}
