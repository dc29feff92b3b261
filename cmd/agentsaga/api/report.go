package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/internal/apikeys"
	"github.com/agentsaga/agentsaga/internal/replayreport"
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
	source, ok := replaySource(run)
	if !ok {
		p := problem(http.StatusNotFound, "not-a-replay", "Not a replay", "run %s is not a replay: it has no recorded tools", run.WorkflowID)
		p.Run = run.WorkflowID
		return p
	}
	// The report shows the source's calls and answer, so the key must see
	// the source too; one it may not see, or one pruned since, is the
	// same 404 as any missing run.
	if _, err := s.visibleRun(r.Context(), key, source); err != nil {
		return err
	}
	report, err := replayreport.Build(r.Context(), s.db, source, run.WorkflowID)
	if err != nil {
		return fmt.Errorf("api: the replay report of %s: %w", run.WorkflowID, err)
	}
	if report.Rows == nil {
		report.Rows = []replayreport.Row{} // a replay that has made no call yet: rows is a list
	}
	writeJSON(w, http.StatusOK, report)
	return nil
}

// replaySource is the run that run replays; ok is false when run is not a
// replay. A replay's sub-agent carries its parent's recording (the top
// replay's source and ID): it replays the source's sub-agent at the same
// call, whose ID extends the source's as its own extends the replay's, as
// the recorded tools answer it (activities' sourceRun).
func replaySource(run agentsagatype.Run) (string, bool) {
	source, ok := replayreport.SourceOf(run.Spec)
	if !ok {
		return "", false
	}
	var spec struct {
		Tools []agentsagatype.ToolSpec `json:"tools"`
	}
	if json.Unmarshal(run.Spec, &spec) == nil {
		for _, t := range spec.Tools {
			if rec := t.Recording; rec != nil && rec.Source == source && rec.Replay != "" && strings.HasPrefix(run.WorkflowID, rec.Replay+"/") {
				return source + strings.TrimPrefix(run.WorkflowID, rec.Replay), true
			}
		}
	}
	return source, true
}
