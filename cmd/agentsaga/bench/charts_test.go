package bench_test

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/cmd/agentsaga/bench"
)

// assertPNG checks that path holds a PNG at least 600 pixels wide.
func assertPNG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err, "%s is not a PNG", path)
	assert.GreaterOrEqual(t, img.Bounds().Dx(), 600)
	assert.Greater(t, img.Bounds().Dy(), 300)
}

// The storm chart draws synthetic per-second counts into a readable PNG.
func TestStormChart(t *testing.T) {
	cfg := bench.StormConfig{Runs: 4, RatePerSecond: 2, OutageFrom: 10 * time.Second, OutageTo: 30 * time.Second, Duration: 50 * time.Second}
	var calm, storm []bench.Second
	for s := 0; s < 50; s++ {
		inOutage := s >= 10 && s < 30
		if inOutage {
			calm = append(calm, bench.Second{Requests: 3, Failures: 3})
			storm = append(storm, bench.Second{Requests: 90, Failures: 90})
		} else {
			calm = append(calm, bench.Second{Requests: 40})
			storm = append(storm, bench.Second{Requests: 40, Failures: 5})
		}
	}
	rows := []bench.StormRow{
		{Contender: "agentsaga (hook, ledger, fleet bucket)", PerSecond: calm},
		{Contender: "unbudgeted (Temporal, 10 attempts a call)", PerSecond: storm},
	}
	path := filepath.Join(t.TempDir(), "storm.png")
	require.NoError(t, bench.StormChart(path, cfg, rows))
	assertPNG(t, path)
}

// The amplification chart draws one bar per contender and the target line.
func TestAmplificationChart(t *testing.T) {
	rows := []bench.Row{
		{Contender: "agentsaga (shared bucket, run ratio)", Amplification: 1.1, Target: 1.8},
		{Contender: "per-worker buckets, not shared", Amplification: 2.4},
		{Contender: "stacked layers (SDK 2 x wrapper 3 x step 3)", Amplification: 18},
		{Contender: "Temporal default retry policy (unbounded, 5 s schedule-to-close)", Amplification: 9.5},
	}
	path := filepath.Join(t.TempDir(), "amplification.png")
	require.NoError(t, bench.AmplificationChart(path, rows))
	assertPNG(t, path)
}

// The spend chart draws each contender's spend over time against the cap,
// one panel per process count.
func TestSpendChart(t *testing.T) {
	series := func(total float64, seconds int) []bench.SpendPoint {
		points := []bench.SpendPoint{{}}
		for s := 1; s <= seconds; s++ {
			points = append(points, bench.SpendPoint{Seconds: float64(s), USD: total * float64(s) / float64(seconds)})
		}
		return points
	}
	var rows []bench.SpendRow
	for _, processes := range []int{2, 4} {
		for _, r := range []struct {
			contender string
			spent     float64
			seconds   int
		}{
			{bench.SpendPerRunContender, 17.9, 20},
			{bench.SpendCheckContender, 5.9, 12},
			{bench.SpendAgentsagaContender, 4.9, 30},
		} {
			rows = append(rows, bench.SpendRow{Contender: r.contender, Processes: processes, Runs: 40, CapUSD: 5, SpentUSD: r.spent,
				OverspendUSD: max(r.spent-5, 0), Utilisation: r.spent / 5, Series: series(r.spent, r.seconds)})
		}
	}
	path := filepath.Join(t.TempDir(), "spend.png")
	require.NoError(t, bench.SpendChart(path, rows))
	assertPNG(t, path)
}
