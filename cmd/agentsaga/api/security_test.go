package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
)

const helloSpec = `goal: say hello
budget: {steps: 2}
model: {provider: scripted, script: [{content: hello}]}
`

// Who may do what: no key or a key that is not live is a 401 that says
// how to authenticate; a key without the route's scope is a 403; another
// account's run is a 404 with the very body a missing run gets; a revoked
// key is refused at its next request.
func TestWhoMayDoWhat(t *testing.T) {
	w := newWorld(t)
	reader := w.key("reader", "acme", apikeys.RunsRead)
	writer := w.key("writer", "acme", apikeys.RunsRead, apikeys.RunsWrite)
	w.run("acme-run", "acme/support")
	w.run("globex-run", "globex")

	for _, token := range []string{"", "agentsaga_not-a-key", "not even the prefix"} {
		a := w.do("GET", "/v1/runs/acme-run", token, "")
		require.Equal(t, http.StatusUnauthorized, a.status, "%q: %s", token, a.body)
		assert.Equal(t, `Bearer realm="agentsaga"`, a.header.Get("WWW-Authenticate"))
		assert.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
		assert.Contains(t, a.json(t)["detail"], "Authorization: Bearer KEY")
	}
	a := w.do("GET", "/v1/runs", "", "", "Authorization", "Basic dXNlcjpwYXNz")
	assert.Equal(t, http.StatusUnauthorized, a.status)

	a = w.do("GET", "/v1/runs/acme-run", reader, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	assert.Equal(t, "acme/support", a.json(t)["account"], "a key sees its sub-accounts' runs")

	a = w.do("POST", "/v1/runs/acme-run/abort", reader, `{"reason":"no"}`)
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	assert.Contains(t, a.json(t)["detail"], "runs:write")
	a = w.do("POST", "/v1/runs", reader, helloSpec)
	assert.Equal(t, http.StatusForbidden, a.status)
	a = w.do("POST", "/v1/runs/acme-run/approvals/call-1/approve", writer, "")
	assert.Equal(t, http.StatusForbidden, a.status, "approvals:decide is a scope of its own")
	assert.Zero(t, w.starts())

	hidden := w.do("GET", "/v1/runs/globex-run", reader, "")
	missing := w.do("GET", "/v1/runs/no-such-run", reader, "")
	require.Equal(t, http.StatusNotFound, hidden.status)
	assert.Equal(t, strings.Replace(string(missing.body), "no-such-run", "globex-run", 1), string(hidden.body),
		"another account's run and a missing run get the same answer")
	for _, path := range []string{"/v1/runs/globex-run/events", "/v1/runs/globex-run/abort", "/v1/runs/globex-run/approvals/c/deny"} {
		method := "GET"
		if !strings.HasSuffix(path, "events") {
			method = "POST"
		}
		token := w.key("all-"+strings.ReplaceAll(path, "/", "-"), "acme", apikeys.Scopes...)
		a := w.do(method, path, token, `{"reason":"r"}`)
		assert.Equal(t, http.StatusNotFound, a.status, "%s %s: %s", method, path, a.body)
	}
	list := w.do("GET", "/v1/runs", reader, "").json(t)["runs"].([]any)
	require.Len(t, list, 1)
	assert.Equal(t, "acme-run", list[0].(map[string]any)["workflow_id"])
	list = w.do("GET", "/v1/runs?account=globex", reader, "").json(t)["runs"].([]any)
	assert.Empty(t, list, "a filter on another account finds nothing")

	// A key bound to an account starts runs charged to it, or to a
	// sub-account, and no other.
	a = w.do("POST", "/v1/runs?account=globex", writer, helloSpec)
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	assert.Contains(t, a.json(t)["detail"], "may not charge a run to globex")
	a = w.do("POST", "/v1/runs", writer, helloSpec+"\n")
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	assert.Equal(t, "acme", a.json(t)["account"], "a spec that names no account is charged to the key's")
	assert.Equal(t, "writer", a.json(t)["started_by"])

	require.NoError(t, apikeys.New(w.db.Pool()).Revoke(t.Context(), "reader"))
	a = w.do("GET", "/v1/runs/acme-run", reader, "")
	assert.Equal(t, http.StatusUnauthorized, a.status, "a revoked key is refused")

	for _, token := range []string{reader, writer} {
		assert.NotContains(t, w.logs.String(), token)
		assert.NotContains(t, w.logs.String(), strings.TrimPrefix(token, "agentsaga_")[:12])
	}
	assert.Contains(t, w.logs.String(), "authentication failed")
}

// Failed authentications from one address are limited: past the burst,
// the next request is a 429 with Retry-After, whatever its key, and its
// key is not looked at; the log names the client, never the key.
func TestFailedAuthenticationsAreRateLimited(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.FailedAuthRate, c.FailedAuthBurst = rate.Every(time.Hour), 3 })
	good := w.key("good", "", apikeys.RunsRead)
	require.Equal(t, http.StatusOK, w.do("GET", "/v1/runs", good, "").status)
	const wrong = "agentsaga_guessing-at-a-key-0123456789"
	for i := range 3 {
		a := w.do("GET", "/v1/runs", wrong, "")
		require.Equal(t, http.StatusUnauthorized, a.status, "failure %d", i+1)
	}
	a := w.do("GET", "/v1/runs", wrong, "")
	require.Equal(t, http.StatusTooManyRequests, a.status, "%s", a.body)
	assert.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
	retry := a.header.Get("Retry-After")
	require.NotEmpty(t, retry)
	assert.NotEqual(t, "0", retry)
	a = w.do("GET", "/v1/runs", good, "")
	assert.Equal(t, http.StatusTooManyRequests, a.status, "the address is limited, not the key")
	assert.Equal(t, 3, strings.Count(w.logs.String(), "authentication failed"))
	assert.NotContains(t, w.logs.String(), "guessing-at-a-key")
	assert.Contains(t, w.logs.String(), "client=127.0.0.1")

	// The routes that need no key are not limited.
	assert.Equal(t, http.StatusOK, w.do("GET", "/v1/openapi.json", "", "").status)
}
