package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga"
	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
	"github.com/agentsaga/agentsaga/internal/ledgerdb"
	"github.com/agentsaga/agentsaga/workflows"
)

// maxSpecBytes caps a run spec's body: a spec is a few KiB; a body past
// this is refused whole (413), never read in part.
const maxSpecBytes = 1 << 20

// maxIDBytes is Temporal's default limit on a workflow ID's length.
const maxIDBytes = 1000

// runView is a run as the API shows it: the ledger's row, and where to
// follow it.
type runView struct {
	agentsagatype.Run
	Approvals []agentsagatype.Approval `json:"approvals,omitempty"`
	Links     runLinks                 `json:"links"`
	// Viewer is the key that reads the run, for a client (the live page)
	// that shows only what the key may do.
	Viewer *viewer `json:"viewer,omitempty"`
}

type viewer struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
}

type runLinks struct {
	Self   string `json:"self"`
	Events string `json:"events"`
	Page   string `json:"page"`
}

func viewOf(run agentsagatype.Run) runView {
	id := url.PathEscape(run.WorkflowID)
	return runView{Run: run, Links: runLinks{Self: "/v1/runs/" + id, Events: "/v1/runs/" + id + "/events", Page: "/runs/" + id}}
}

// checkID refuses an ID no run could have: empty, too long, not UTF-8, or
// holding control characters.
func checkID(what, id string) *Problem {
	switch {
	case id == "":
		return badRequest("the %s is empty", what)
	case len(id) > maxIDBytes:
		return badRequest("the %s is %d bytes long; at most %d", what, len(id), maxIDBytes)
	case !utf8.ValidString(id):
		return badRequest("the %s is not UTF-8", what)
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return badRequest("the %s %q holds a control character", what, id)
		}
	}
	return nil
}

// onlyParams refuses a query parameter the route does not take, or one
// given twice: what a client meant by it would be lost.
func onlyParams(r *http.Request, names ...string) (url.Values, *Problem) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("the query string does not parse: %v", err)
	}
next:
	for name, values := range q {
		for _, n := range names {
			if name == n {
				if len(values) > 1 {
					return nil, badRequest("the query parameter %q is given %d times; give it once", name, len(values))
				}
				continue next
			}
		}
		return nil, badRequest("unknown query parameter %q; this route takes %v", name, names)
	}
	return q, nil
}

// visibleRun reads a run the key may see; any other is notFound.
func (s *Server) visibleRun(ctx context.Context, key apikeys.Key, id string) (agentsagatype.Run, error) {
	if p := checkID("run ID", id); p != nil {
		return agentsagatype.Run{}, p
	}
	run, err := s.db.GetRun(ctx, id)
	if errors.Is(err, ledgerdb.ErrNotFound) || (err == nil && !key.Sees(run.Account)) {
		return agentsagatype.Run{}, notFound(id)
	}
	return run, err
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	if _, p := onlyParams(r); p != nil {
		return p
	}
	run, err := s.visibleRun(r.Context(), key, r.PathValue("id"))
	if err != nil {
		return err
	}
	view := viewOf(run)
	view.Viewer = &viewer{Name: key.Name, Scopes: key.Scopes}
	if view.Approvals, err = s.db.RunApprovals(r.Context(), run.WorkflowID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, view)
	return nil
}

// cursor is where a page of GET /v1/runs ended, opaque to clients.
type cursor struct {
	StartedAt time.Time `json:"t"`
	ID        string    `json:"id"`
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	q, p := onlyParams(r, "status", "account", "limit", "cursor")
	if p != nil {
		return p
	}
	f := ledgerdb.RunFilter{Status: q.Get("status"), Account: q.Get("account"), Under: key.Account, Limit: 50}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("limit %q: give a number from 1 to 1000", v)
		}
		f.Limit = n
	}
	for name, v := range map[string]string{"status": f.Status, "account": f.Account} {
		if v != "" {
			if p := checkID(name, v); p != nil {
				return p
			}
		}
	}
	if v := q.Get("cursor"); v != "" {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		var c cursor
		if err != nil || json.Unmarshal(raw, &c) != nil || c.StartedAt.IsZero() || checkID("cursor", c.ID) != nil {
			return badRequest("cursor %q is not one this API gave; pass next_cursor as it came", v)
		}
		f.After = &ledgerdb.RunCursor{StartedAt: c.StartedAt, WorkflowID: c.ID}
	}
	want := f.Limit
	f.Limit++ // one more tells whether there is a next page
	runs, err := s.db.ListRuns(r.Context(), f)
	if err != nil {
		return err
	}
	page := struct {
		Runs       []runView `json:"runs"`
		NextCursor string    `json:"next_cursor,omitempty"`
	}{Runs: []runView{}}
	for i, run := range runs {
		if i == want {
			last := runs[i-1]
			raw, _ := json.Marshal(cursor{StartedAt: last.StartedAt, ID: last.WorkflowID})
			page.NextCursor = base64.RawURLEncoding.EncodeToString(raw)
			break
		}
		page.Runs = append(page.Runs, viewOf(run))
	}
	writeJSON(w, http.StatusOK, page)
	return nil
}

// specTypes are the media types a spec may come as; none at all is read
// as either, as `agentsaga run --spec` reads a file.
var specTypes = map[string]bool{"application/json": true, "application/yaml": true, "application/x-yaml": true,
	"text/yaml": true, "text/x-yaml": true, "application/yml": true}

// startRun is POST /v1/runs: the body is a run spec, JSON or YAML, as
// `agentsaga run --spec` takes it; ?id=, ?account= and ?priority= are its
// --id, --account and --priority.
func (s *Server) startRun(w http.ResponseWriter, r *http.Request, key apikeys.Key) error {
	q, p := onlyParams(r, "id", "account", "priority")
	if p != nil {
		return p
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		media, _, err := mime.ParseMediaType(ct)
		if err != nil || !specTypes[media] {
			return problem(http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported media type",
				"Content-Type %q: send the spec as application/json or application/yaml", ct)
		}
	}
	id, account := q.Get("id"), q.Get("account")
	if q.Has("id") {
		if p := checkID("run ID", id); p != nil {
			return p
		}
	}
	if q.Has("account") {
		if p := checkID("account", account); p != nil {
			return p
		}
	}
	idemKey := r.Header.Get("Idempotency-Key")
	if _, given := r.Header["Idempotency-Key"]; given {
		if p := checkIdempotencyKey(idemKey); p != nil {
			return p
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSpecBytes))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("the body is empty; send a run spec (JSON or YAML)")
	}
	spec, err := workflows.ParseSpec(body)
	if err != nil {
		return problem(http.StatusBadRequest, "invalid-spec", "Invalid spec", "%v", err)
	}
	if q.Has("priority") {
		// It stands for the spec's priority, as --priority does.
		n, err := strconv.Atoi(q.Get("priority"))
		if err != nil || n < 1 || n > ledgerdb.MaxPriority {
			return badRequest("priority %q: give 1 (first in the admission queue) to %d (last)", q.Get("priority"), ledgerdb.MaxPriority)
		}
		spec.Priority = n
	}
	// The account the run is charged to decides who sees it: a key bound
	// to an account charges its runs to it when the spec names none, and
	// may charge only its account or a sub-account.
	charged := account
	if charged == "" {
		charged = spec.Budget.Account
	} else if spec.Budget.Account != "" && spec.Budget.Account != charged {
		return problem(http.StatusUnprocessableEntity, "invalid-spec", "Invalid spec",
			"budget.account: the spec charges %s and ?account= charges %s; name one", spec.Budget.Account, charged)
	}
	if charged == "" {
		charged = key.Account
	}
	if !key.Sees(charged) {
		return problem(http.StatusForbidden, "forbidden", "Forbidden",
			"the key %q is bound to account %s and may not charge a run to %s", key.Name, key.Account, charged)
	}

	if idemKey == "" {
		if id == "" {
			id = newRunID()
		}
		run, err := s.start(r.Context(), key, id, spec, charged)
		if err != nil {
			return err
		}
		return s.answerStart(w, r, run, http.StatusCreated)
	}
	// The same Idempotency-Key and the same request start one run: the
	// key is bound to the request's hash and to the ID it starts before
	// the start, so a retry (here or at another API process) finds it.
	sum := sha256.New()
	parts := [][]byte{[]byte(id), []byte(account), body}
	if q.Has("priority") { // a part only when given, so that the hashes of requests without it stay as they were
		parts = append(parts, []byte("priority="+q.Get("priority")))
	}
	for _, part := range parts {
		fmt.Fprintf(sum, "%d:", len(part))
		sum.Write(part)
	}
	if id == "" {
		id = newRunID()
	}
	claim, err := s.db.ClaimStart(r.Context(), key.Name, idemKey, sum.Sum(nil), id)
	if err != nil {
		return err
	}
	if !bytes.Equal(claim.RequestHash, sum.Sum(nil)) {
		p := problem(http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused",
			"Idempotency-Key %q was sent before with another request (which started run %s); send a new key for a new request", idemKey, claim.WorkflowID)
		p.Run = claim.WorkflowID
		return p
	}
	if !claim.New {
		if run, err := s.db.GetRun(r.Context(), claim.WorkflowID); err == nil {
			return s.answerStart(w, r, run, http.StatusOK)
		} else if !errors.Is(err, ledgerdb.ErrNotFound) {
			return err
		}
		// Bound, and not recorded yet: the first request is still
		// starting it, or died before it could. Starting again under the
		// bound ID is safe: one of the two starts wins, and the other is
		// told the run exists.
	}
	run, err := s.start(r.Context(), key, claim.WorkflowID, spec, charged)
	var exists *agentsaga.RunExistsError
	switch {
	case err == nil:
		return s.answerStart(w, r, run, http.StatusCreated)
	case !claim.New && errors.As(err, &exists):
		if run, err = s.recordStart(r.Context(), key, claim.WorkflowID, "", spec, charged); err != nil {
			return err
		}
		return s.answerStart(w, r, run, http.StatusOK)
	}
	var p2 *Problem
	if errors.As(err, &p2) && p2.Status < 500 {
		// Refused: nothing started, so the key binds nothing and may be
		// sent again with a corrected request.
		if err := s.db.ReleaseStart(context.WithoutCancel(r.Context()), key.Name, idemKey, claim.WorkflowID); err != nil {
			s.cfg.Logger.Error("api: release an idempotency key", "error", err)
		}
	}
	return err
}

// start starts the run through cfg.Start and writes its ledger row.
func (s *Server) start(ctx context.Context, key apikeys.Key, id string, spec workflows.RunSpec, account string) (agentsagatype.Run, error) {
	if s.cfg.Start == nil {
		return agentsagatype.Run{}, problem(http.StatusServiceUnavailable, "unavailable", "Unavailable", "this API process does not start runs")
	}
	started, err := s.cfg.Start(ctx, id, spec, account)
	var invalid *agentsaga.InvalidSpecError
	var exists *agentsaga.RunExistsError
	switch {
	case errors.As(err, &invalid):
		return agentsagatype.Run{}, problem(http.StatusUnprocessableEntity, "invalid-spec", "Invalid spec", "%v", invalid.Err)
	case errors.As(err, &exists):
		p := problem(http.StatusConflict, "run-exists", "Run exists", "a run with the ID %q already exists; pick another ID", id)
		p.Run = id
		return agentsagatype.Run{}, errors.Join(p, err)
	case err != nil:
		s.cfg.Logger.Error("api: start a run", "run", id, "error", err)
		return agentsagatype.Run{}, problem(http.StatusBadGateway, "temporal", "Temporal did not start the run",
			"run %s was not started: %v; sending the same request again is safe with an Idempotency-Key", id, err)
	}
	return s.recordStart(ctx, key, id, started.RunID, spec, account)
}

// recordStart writes the run's ledger row now, with who started it: the
// run's first activity writes it too, but later, and a GET straight after
// the POST must find it.
func (s *Server) recordStart(ctx context.Context, key apikeys.Key, id, runID string, spec workflows.RunSpec, account string) (agentsagatype.Run, error) {
	spec.Budget.Account = account
	if resolved, err := spec.Resolve(); err == nil {
		spec = resolved
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return agentsagatype.Run{}, fmt.Errorf("api: record the start of %s: %w", id, err)
	}
	if err := s.db.StartRunBy(ctx, agentsagatype.Run{WorkflowID: id, RunID: runID, Goal: spec.Goal, Spec: raw}, key.Name); err != nil {
		return agentsagatype.Run{}, err
	}
	return s.db.GetRun(ctx, id)
}

func (s *Server) answerStart(w http.ResponseWriter, r *http.Request, run agentsagatype.Run, status int) error {
	view := viewOf(run)
	w.Header().Set("Location", view.Links.Self)
	writeJSON(w, status, view)
	return nil
}

// checkIdempotencyKey refuses a key that is empty, long or not printable
// ASCII (RFC 9110 field values; the IETF draft asks for a string).
func checkIdempotencyKey(k string) *Problem {
	if k == "" || len(k) > 255 {
		return badRequest("the Idempotency-Key header is %d bytes; give 1 to 255", len(k))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return badRequest("the Idempotency-Key header holds a byte %#x; use printable ASCII", k[i])
		}
	}
	return nil
}

func newRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "run-" + hex.EncodeToString(b)
}
