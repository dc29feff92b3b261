package api

import (
	_ "embed"
	"net/http"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
)

// openAPIDocument describes every route; a test holds it to Routes.
//
//go:embed openapi.json
var openAPIDocument []byte

// livePage is a run's live page: one file, its script and style inline,
// with no build step.
//
//go:embed page.html
var livePage []byte

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request, _ apikeys.Key) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Access-Control-Allow-Origin", "*") // a public description, for tools
	_, _ = w.Write(openAPIDocument)
	return nil
}

// page is GET /runs/{id}. It holds no run data (the page reads the run
// with the key its user gives it), so it needs no key itself.
func (s *Server) page(w http.ResponseWriter, r *http.Request, _ apikeys.Key) error {
	if p := checkID("run ID", r.PathValue("id")); p != nil {
		return p
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	// Only the page's own inline script and style, and requests back to
	// this origin: a run's text is shown as text, and even a script that
	// slipped in could send the key nowhere else.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(livePage)
	return nil
}
