package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRatioEstimate: the estimate scales the sampled share to the table,
// and its 95% interval is Cochran's for a ratio over page clusters.
func TestRatioEstimate(t *testing.T) {
	// 4 pages of 10 rows, 2, 4, 2, 4 matching: R = 0.3, residuals
	// -1, 1, -1, 1; variance 4/(4*3*100) = 1/300, half width 1.96*0.0577.
	c := ratioEstimate([]float64{10, 10, 10, 10}, []float64{2, 4, 2, 4}, 1000)
	require.Equal(t, 300, c.N)
	require.Equal(t, 186, c.Low)  // floor((0.3 - 0.11316) * 1000)
	require.Equal(t, 414, c.High) // ceil((0.3 + 0.11316) * 1000)
	require.False(t, c.Exact)

	// Every page alike: no spread, but a share seen in none of 400
	// sampled rows is below 3/400 (the rule of three), not surely 0.
	c = ratioEstimate([]float64{100, 100, 100, 100}, []float64{0, 0, 0, 0}, 10000)
	require.Equal(t, Count{N: 0, Low: 0, High: 75}, c)

	// Nothing sampled: anything from none to all.
	require.Equal(t, Count{N: 0, Low: 0, High: 500}, ratioEstimate(nil, nil, 500))
}
