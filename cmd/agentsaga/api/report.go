package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
)

// getReport is GET /v1/runs/{id}/report: a replay set beside the run it
// replays, the report `agentsaga replay --json` prints (issue 34). A
// replay still running gets its report so far: the candidate's status
// says which it is, and the live page reads it again when the run ends.
func (s *Server) getReport(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	if _, p := onlyParams(r); p != nil {
		return p
	}
	run, err := s.visibleRun(r.Context(), key, r.PathValue("id"))
	if err != nil {
		return err
	}
	report, err := agentsaga.ReportReplay(r.Context(), s.cfg.Store, run.WorkflowID)
	if errors.Is(err, agentsaga.ErrNotAReplay) {
		p := problem(http.StatusNotFound, "not-a-replay", "Not a replay", "run %s is not a replay: it has no recorded tools", run.WorkflowID)
		p.Run = run.WorkflowID
		return p
	}
	if errors.Is(err, agentsaga.ErrRunNotFound) {
		// The replay was read above: what is missing is the run it
		// replays (or its top replay), pruned since. Its ID is not
		// named: the key may not see its account.
		return problem(http.StatusNotFound, "not-found", "Not found", "the run that %s replays is not in the ledger", run.WorkflowID)
	}
	if err != nil {
		return fmt.Errorf("api: the replay report of %s: %w", run.WorkflowID, err)
	}
	// A replay's sub-agent is in its top replay's report, under the call
	// that started it (which recorded sub-agent answered it depends on
	// the matching, which the report shows): the page of either shows
	// the whole replay. The report shows the source's calls and answer,
	// so the key must see the source too; one it may not see, or one
	// pruned since, is the same 404 as any missing run, and nothing of
	// the report is written.
	for _, id := range []string{report.Candidate.ID, report.Recorded.ID} {
		if id == run.WorkflowID {
			continue // read above
		}
		if _, err := s.visibleRun(r.Context(), key, id); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, report)
	return nil
}
