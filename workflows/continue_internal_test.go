package workflows

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/budget"
)

// The state a run carries across continue-as-new is a replay contract:
// every carried state in the replay corpus decodes into Carried and
// encodes back to the same JSON, and a run resumed from it carries it on
// unchanged, but for the mark of a fork's first execution.
func TestCarriedStateKeepsItsShape(t *testing.T) {
	var carried []json.RawMessage
	err := filepath.WalkDir("testdata/histories", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var history any
		if err := json.Unmarshal(raw, &history); err != nil {
			return err
		}
		for _, data := range payloadData(history) {
			var spec struct {
				Carried json.RawMessage `json:"carried"`
			}
			if json.Unmarshal(data, &spec) == nil && len(spec.Carried) > 0 {
				carried = append(carried, spec.Carried)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, carried, "the corpus holds runs that continued as new")

	for _, raw := range carried {
		var c Carried
		require.NoError(t, json.Unmarshal(raw, &c))
		again, err := json.Marshal(c)
		require.NoError(t, err)
		require.JSONEq(t, string(raw), string(again))

		r, err := newRun(RunSpec{Budget: c.Limits}, "wf", c.Start)
		require.NoError(t, err)
		r.resume(c)
		resumed, err := json.Marshal(r.carry())
		require.NoError(t, err)
		// Only a fork's first execution is marked as one (ForkedFrom): the
		// mark is not carried on.
		c.ForkedFrom = ""
		want, err := json.Marshal(c)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(resumed))
	}
}

// payloadData decodes every payload's data in a history's JSON.
func payloadData(v any) [][]byte {
	var out [][]byte
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "data" {
				if data, err := base64.StdEncoding.DecodeString(s); err == nil {
					out = append(out, data)
				}
				continue
			}
			out = append(out, payloadData(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, payloadData(x)...)
		}
	}
	return out
}

// A run's breakers are kept sorted, with since when each outage lasted
// where that is known, as the note and the carried state read them.
func TestOpenBreakersStaySortedWithTheirSince(t *testing.T) {
	r, err := newRun(RunSpec{Budget: budget.Limits{Steps: 10}}, "wf", time.Time{})
	require.NoError(t, err)
	since := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	r.calls.markOpen("model", time.Time{})
	r.calls.markOpen("fetch", since.Add(time.Minute))
	r.calls.markOpen("fetch", since) // an earlier start is kept
	r.calls.markOpen("fetch", since.Add(2*time.Minute))
	require.Equal(t, []string{"fetch", "model"}, r.calls.Open)
	require.Equal(t, []string{"fetch (down since 09:00:00 UTC)", "model"}, r.calls.openBreakers())
	r.calls.markClosed("fetch")
	require.Equal(t, []string{"model"}, r.calls.Open)
	require.Empty(t, r.calls.OpenSince)
}
