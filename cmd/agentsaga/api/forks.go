package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/workflows"
)

// forkBody is POST /v1/runs/{id}/fork's body.
type forkBody struct {
	// At is a step number (a JSON number or string), or "failed".
	At json.RawMessage `json:"at"`
	// Spec replaces the run's spec from At on; Model ("provider:name")
	// its model.
	Spec    json.RawMessage `json:"spec"`
	Model   string          `json:"model"`
	Message string          `json:"message"`
	ID      string          `json:"id"`
}

// fork is POST /v1/runs/{id}/fork: the run forked from a step
// (agentsaga.Run.Fork), recorded as forked by the key's name. The fork is
// charged to the account the run was, so a key that sees the run sees
// its fork.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	source, err := s.visibleRun(r.Context(), key, r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, p := onlyParams(r); p != nil {
		return p
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSpecBytes))
	if err != nil {
		return err
	}
	var in forkBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return badRequest("the body does not fit a fork (at, spec, model, message, id): %v", err)
	}
	opts, p := forkOptions(in)
	if p != nil {
		return p
	}
	if opts.ID != "" {
		if p := checkID("fork's run ID", opts.ID); p != nil {
			return p
		}
	}
	if opts.Spec != nil && opts.Spec.Budget.Account != "" && opts.Spec.Budget.Account != source.Account {
		return problem(http.StatusUnprocessableEntity, "invalid-spec", "Invalid spec",
			"budget.account: the spec charges %s and the run was charged to %s; a fork is charged where its run was", opts.Spec.Budget.Account, source.Account)
	}
	opts.StartedBy, opts.Start = key.Name, agentsaga.StartOptions{Namespace: s.cfg.Namespace, Account: source.Account}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.DecisionTimeout)
	defer cancel()
	fork, err := agentsaga.Get(s.cfg.Client, source.WorkflowID).WithLedger(s.cfg.Store).Fork(ctx, opts)
	var invalid *agentsaga.InvalidSpecError
	var exists *agentsaga.RunExistsError
	switch {
	case errors.As(err, &invalid):
		return problem(http.StatusUnprocessableEntity, "invalid-spec", "Invalid spec", "%v", invalid.Err)
	case errors.As(err, &exists):
		return problem(http.StatusConflict, "run-exists", "Run exists", "%v", err)
	case errors.Is(err, agentsaga.ErrForkRefused):
		p := problem(http.StatusConflict, "fork-refused", "Fork refused", "%v", err)
		p.Run = source.WorkflowID
		return p
	case err != nil:
		return err
	}
	run, err := s.db.GetRun(r.Context(), fork.ID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, viewOf(run))
	return nil
}

// forkOptions reads a fork's body, or says what is wrong with it.
func forkOptions(in forkBody) (agentsaga.ForkOptions, *Problem) {
	var opts agentsaga.ForkOptions
	if len(in.At) == 0 {
		return opts, badRequest("at is required: a step number, or \"failed\"")
	}
	var at string
	if json.Unmarshal(in.At, &at) != nil {
		var n json.Number
		if err := json.Unmarshal(in.At, &n); err != nil {
			return opts, badRequest("at: %s is not a step number or \"failed\"", in.At)
		}
		at = n.String()
	}
	step, err := agentsaga.ParseForkAt(at)
	if err != nil {
		return opts, badRequest("%v", err)
	}
	if len(in.Spec) > 0 && in.Model != "" {
		return opts, badRequest("spec and model: name one (a spec names its model)")
	}
	if len(in.Spec) > 0 && !bytes.Equal(bytes.TrimSpace(in.Spec), []byte("null")) {
		spec, err := workflows.ParseSpec(in.Spec)
		if err != nil {
			return opts, problem(http.StatusBadRequest, "invalid-spec", "Invalid spec", "%v", err)
		}
		opts.Spec = &spec
	}
	if in.Model != "" {
		m, err := agentsaga.ParseModel(in.Model)
		if err != nil {
			return opts, badRequest("%v", err)
		}
		opts.Model = &m
	}
	if len(in.Message) > maxDecisionBytes {
		return opts, badRequest("message is %d bytes long; at most %d", len(in.Message), maxDecisionBytes)
	}
	opts.At, opts.Message, opts.ID = step, in.Message, in.ID
	return opts, nil
}
