package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/agentsagatype"
	"github.com/agentsaga/agentsaga/cmd/agentsaga/apikeys"
)

// No input makes the API fail on its side: whatever the body of a start,
// the IDs in a path, the Last-Event-ID or the query, the answer is never a
// 5xx. `go test` runs the seeds; `go test -fuzz FuzzAPIInputs` fuzzes.
func FuzzAPIInputs(f *testing.F) {
	f.Add(helloSpec, "run-1", "", "id=fz-1")
	f.Add(`{"goal":"g","budget":{"steps":1},"model":{"provider":"scripted","script":[{"content":"x"}]}}`, "a/b", "3", "account=x&limit=2")
	f.Add("goal: [", "%2F", "-1", "cursor=eyJ0IjoiMjAyNi0wMS0wMVQwMDowMDowMFoiLCJpZCI6ImEifQ")
	f.Add("goal: g\nmodel: {provider: scripted}\ncarried: {}", "..", "9223372036854775808", "limit=99999999999999999999")
	f.Add("\x00\xff", "\x7f", "1\n2", "status=%ZZ")
	f.Add(strings.Repeat("{", 5000), "run-1", "0", "after=1&after=2")

	w := newWorld(f)
	token := w.key("fuzz", "", apikeys.Scopes...)
	w.run("run-1", "")
	require.NoError(f, w.db.FinishRun(context.Background(), "run-1", agentsagatype.RunOutcome{Status: agentsagatype.RunCompleted}))

	f.Fuzz(func(t *testing.T, body, id, lastEventID, query string) {
		send := func(method, target, body string, headers ...string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, method, "http://api.test"+target, strings.NewReader(body))
			if err != nil {
				return // no client can send it
			}
			req.RemoteAddr = "192.0.2.1:1234"
			req.Header.Set("Authorization", "Bearer "+token)
			for i := 0; i+1 < len(headers); i += 2 {
				if !validHeaderValue(headers[i+1]) {
					return
				}
				req.Header.Set(headers[i], headers[i+1])
			}
			rec := httptest.NewRecorder()
			w.api.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("%s %s (headers %q, body %q): %d %s", method, target, headers, body, rec.Code, rec.Body)
			}
		}
		path := "/v1/runs/" + url.PathEscape(id)
		send("POST", "/v1/runs?"+query, body, "Content-Type", "application/yaml", "Idempotency-Key", "k-"+url.QueryEscape(lastEventID))
		send("GET", "/v1/runs?"+query, "")
		send("GET", path+"?"+query, "")
		send("GET", path+"/events?"+query, "", "Last-Event-ID", lastEventID)
		send("GET", "/v1/approvals?"+query, "")
		send("GET", "/runs/"+url.PathEscape(id), "")
		if id != "run-1" { // a run that exists would be asked of Temporal, which this world has not
			send("POST", path+"/resume", body)
			send("POST", path+"/fork", body)
			send("POST", path+"/approvals/"+url.PathEscape(lastEventID)+"/deny", body)
		}
	})
}

// validHeaderValue is what net/http would send as a header value.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
