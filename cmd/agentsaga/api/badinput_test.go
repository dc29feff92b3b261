package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
)

// Bad input is a 4xx problem+json whose detail names what is wrong, never
// a 500, and starts nothing.
func TestBadInputIsAProblemThatNamesIt(t *testing.T) {
	w := newWorld(t)
	token := w.key("app", "", apikeys.Scopes...)
	w.run("run-1", "")
	cases := []struct {
		method, path, body string
		headers            []string
		status             int
		detail             string
	}{
		{"POST", "/v1/runs", "goal: [unclosed", nil, 400, "not valid YAML or JSON"},
		{"POST", "/v1/runs", `{"goal": "g", "modle": {}}`, nil, 400, `unknown field "modle"`},
		{"POST", "/v1/runs", `{"goal": "g", "goal": "h"}`, nil, 400, `key "goal" already set`},
		{"POST", "/v1/runs", "", nil, 400, "the body is empty"},
		{"POST", "/v1/runs", helloSpec, []string{"Content-Type", "text/html"}, 415, `Content-Type "text/html"`},
		{"POST", "/v1/runs", `{"goal": "` + strings.Repeat("x", maxSpecBytes) + `"}`, nil, 413, "over 1048576 bytes"},
		{"POST", "/v1/runs?id=a%00b", helloSpec, nil, 400, "control character"},
		{"POST", "/v1/runs?id=" + strings.Repeat("i", 1001), helloSpec, nil, 400, "at most 1000"},
		{"POST", "/v1/runs?idd=x", helloSpec, nil, 400, `unknown query parameter "idd"`},
		{"POST", "/v1/runs?id=a&id=b", helloSpec, nil, 400, `"id" is given 2 times`},
		{"POST", "/v1/runs?account=other", "goal: g\nbudget: {steps: 1, account: mine}\nmodel: {provider: scripted, script: [{content: x}]}", nil, 422, "name one"},
		{"POST", "/v1/runs", helloSpec, []string{"Idempotency-Key", "has space"}, 400, "Idempotency-Key"},
		{"POST", "/v1/runs", "goal: g\nmodel: {provider: nobody}", nil, 400, "nobody"},
		{"GET", "/v1/runs?limit=0", "", nil, 400, `limit "0"`},
		{"GET", "/v1/runs?limit=x", "", nil, 400, `limit "x"`},
		{"GET", "/v1/runs?cursor=bm90LWEtY3Vyc29y", "", nil, 400, "cursor"},
		{"GET", "/v1/runs?cursor=%%", "", nil, 400, "query string"},
		{"GET", "/v1/runs/run-1?x=1", "", nil, 400, `unknown query parameter "x"`},
		{"GET", "/v1/runs/" + url.PathEscape(string([]byte{0xff})), "", nil, 400, "not UTF-8"},
		{"GET", "/v1/runs/run-1/events", "", []string{"Last-Event-ID", "seven"}, 400, `Last-Event-ID "seven"`},
		{"GET", "/v1/runs/run-1/events?after=-1", "", nil, 400, `?after= "-1"`},
		{"POST", "/v1/runs/run-1/resume", `{"message": "go", "add_ushd": 1}`, nil, 400, `unknown field "add_ushd"`},
		{"POST", "/v1/runs/run-1/resume", `{"message": 7}`, nil, 400, "does not fit"},
		{"POST", "/v1/runs/run-1/resume", `[]`, nil, 400, "not a JSON object"},
		{"POST", "/v1/runs/run-1/resume", `{}`, nil, 400, "message is required"},
		{"POST", "/v1/runs/run-1/abort", ``, nil, 400, "reason is required"},
		{"POST", "/v1/runs/run-1/retry", `{"reason": "x"}`, nil, 400, `unknown field "reason"`},
		{"POST", "/v1/runs/run-1/approvals/c1/deny", `{}`, nil, 400, "reason is required to deny"},
		{"POST", "/v1/runs/run-1/resume", `{"message": "` + strings.Repeat("m", 70<<10) + `"}`, nil, 413, "over 65536 bytes"},
		{"POST", "/v1/runs/run-1/fork", `{}`, nil, 400, "at is required"},
		{"POST", "/v1/runs/run-1/fork", `{"at": "soon"}`, nil, 400, "give a step number from 1, or failed"},
		{"POST", "/v1/runs/run-1/fork", `{"at": 0}`, nil, 400, "give a step number from 1"},
		{"POST", "/v1/runs/run-1/fork", `{"at": [3]}`, nil, 400, "not a step number"},
		{"POST", "/v1/runs/run-1/fork", `{"at": 3, "modle": "x"}`, nil, 400, `unknown field "modle"`},
		{"POST", "/v1/runs/run-1/fork", `{"at": 3, "model": "openai:gpt-4o", "spec": {"goal": "g"}}`, nil, 400, "name one"},
		{"POST", "/v1/runs/run-1/fork", `{"at": 3, "model": "nobody"}`, nil, 400, "nobody"},
		{"POST", "/v1/runs/run-1/fork", `{"at": 3, "id": "a\u0000b"}`, nil, 400, "control character"},
		{"POST", "/v1/runs/run-1/fork?x=1", `{"at": 3}`, nil, 400, `unknown query parameter "x"`},
		{"GET", "/v1/approvals?limit=5000", "", nil, 400, "limit"},
		{"DELETE", "/v1/runs/run-1", "", nil, 405, "DELETE is not allowed"},
		{"GET", "/v2/runs", "", nil, 404, "no route GET /v2/runs"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s %.40s", c.method, c.path), func(t *testing.T) {
			a := w.do(c.method, c.path, token, c.body, c.headers...)
			require.Equal(t, c.status, a.status, "%s", a.body)
			assert.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
			p := a.json(t)
			assert.EqualValues(t, c.status, p["status"])
			assert.Contains(t, p["type"], problemBase)
			assert.NotEmpty(t, p["title"])
			assert.Contains(t, p["detail"], c.detail)
		})
	}
	assert.Zero(t, w.starts(), "no bad request started a run")
	a := w.do("DELETE", "/v1/runs/run-1", token, "")
	assert.Equal(t, "GET, HEAD", a.header.Get("Allow"))
}

// The same Idempotency-Key and the same spec start one run: 201, then
// 200 with the same run; the same key with another spec is a 422 that
// names the run the key started; a refused start frees its key; keys are
// per API key.
func TestIdempotencyKeyStartsOneRun(t *testing.T) {
	w := newWorld(t)
	token := w.key("app", "", apikeys.RunsRead, apikeys.RunsWrite)
	other := w.key("other-app", "", apikeys.RunsRead, apikeys.RunsWrite)
	first := w.do("POST", "/v1/runs", token, helloSpec, "Idempotency-Key", "order-17")
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	id := first.json(t)["workflow_id"].(string)
	assert.Equal(t, "/v1/runs/"+id, first.header.Get("Location"))
	again := w.do("POST", "/v1/runs", token, helloSpec, "Idempotency-Key", "order-17")
	require.Equal(t, http.StatusOK, again.status, "%s", again.body)
	assert.Equal(t, id, again.json(t)["workflow_id"])
	assert.Equal(t, 1, w.starts())

	changed := w.do("POST", "/v1/runs", token, strings.Replace(helloSpec, "hello", "goodbye", -1), "Idempotency-Key", "order-17")
	require.Equal(t, http.StatusUnprocessableEntity, changed.status, "%s", changed.body)
	assert.Contains(t, changed.json(t)["detail"], "sent before with another request")
	assert.Equal(t, id, changed.json(t)["run"])
	assert.Equal(t, 1, w.starts())

	theirs := w.do("POST", "/v1/runs", other, helloSpec, "Idempotency-Key", "order-17")
	require.Equal(t, http.StatusCreated, theirs.status, "another key's Idempotency-Key is its own")
	assert.NotEqual(t, id, theirs.json(t)["workflow_id"])

	// A start refused (the ID is taken) binds nothing.
	taken := w.do("POST", "/v1/runs?id="+id, token, helloSpec, "Idempotency-Key", "order-18")
	require.Equal(t, http.StatusConflict, taken.status, "%s", taken.body)
	assert.Equal(t, "run-exists", strings.TrimPrefix(taken.json(t)["type"].(string), problemBase))
	fresh := w.do("POST", "/v1/runs?id=run-18", token, helloSpec, "Idempotency-Key", "order-18")
	require.Equal(t, http.StatusCreated, fresh.status, "%s", fresh.body)

	// A GET straight after the POST finds the run, with who started it.
	got := w.do("GET", "/v1/runs/run-18", token, "")
	require.Equal(t, http.StatusOK, got.status, "%s", got.body)
	assert.Equal(t, "app", got.json(t)["started_by"])
	assert.Equal(t, "say hello", got.json(t)["goal"])
}
