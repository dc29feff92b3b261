package bench_test

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/bench"
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
