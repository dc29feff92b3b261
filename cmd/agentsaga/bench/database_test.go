package bench_test

import (
	"net/url"
	"testing"

	"github.com/agentsaga/agentsaga/agentsagatest"
)

// pooledDatabase is a migrated database of the test's own whose URL bounds
// the pools opened on it to 8 connections (pool_max_conns), as the
// library's tests do, so that a benchmark's several workers, each with its
// pool, hold a share of Postgres that parallel packages leave room for.
func pooledDatabase(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(agentsagatest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "8")
	u.RawQuery = q.Encode()
	return u.String()
}
