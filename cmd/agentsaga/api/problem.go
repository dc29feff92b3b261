package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// problemBase is where each problem type is described: docs/api.md has a
// heading per type.
const problemBase = "https://github.com/agentsaga/agentsaga/blob/main/docs/api.md#"

// Problem is an error answer, as RFC 9457 shapes it (application/problem+json):
// a type (a URI naming the kind of problem), its title, the status, and a
// detail that names what is wrong with this request.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Run names the run the problem is of, where there is one to name.
	Run string `json:"run,omitempty"`
	// FirstDecision is the decision that came first, for an approval or
	// denial that came second.
	FirstDecision *firstDecision `json:"first_decision,omitempty"`

	retryAfter time.Duration
}

type firstDecision struct {
	Decision string    `json:"decision"`
	By       string    `json:"by"`
	At       time.Time `json:"at,omitzero"`
	Reason   string    `json:"reason,omitempty"`
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }

// problem makes a Problem of a type (a heading of docs/api.md).
func problem(status int, slug, title, format string, args ...any) *Problem {
	return &Problem{Type: problemBase + slug, Title: title, Status: status, Detail: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) *Problem {
	return problem(http.StatusBadRequest, "bad-request", "Bad request", format, args...)
}

// notFound is the one answer for a run that does not exist and for a run
// the key may not see, so that a key learns nothing of other accounts'
// runs, not even that they exist.
func notFound(id string) *Problem {
	return problem(http.StatusNotFound, "not-found", "Not found", "no run %q that this key may see", id)
}

// writeProblem sends p.
func writeProblem(w http.ResponseWriter, p *Problem) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if p.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="agentsaga"`)
	}
	if p.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int((p.retryAfter+time.Second-1)/time.Second)))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
