package bench

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The figures the stream scenario prints are read as they should be: a
// sample's percentiles by rank, and a process's CPU and peak memory from
// /proc.
func TestStreamFiguresAreReadRight(t *testing.T) {
	sample := make([]float64, 100)
	for i := range sample {
		sample[i] = float64(100 - i) // 100..1, out of order
	}
	p := percentiles(sample)
	assert.Equal(t, Percentiles{N: 100, P50: 51, P95: 96, Max: 100}, p)
	assert.Equal(t, Percentiles{}, percentiles(nil))

	cpu, err := processCPU(os.Getpid())
	require.NoError(t, err)
	assert.GreaterOrEqual(t, cpu, 0.0)
	peak, err := peakMiB(os.Getpid())
	require.NoError(t, err)
	assert.Greater(t, peak, 1.0, "a Go test binary holds more than a MiB")
}
