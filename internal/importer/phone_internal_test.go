package importer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The report shows a refused phone masked, so its reason says precisely
// what is wrong with it.
func TestPhoneReasonSaysWhatIsWrong(t *testing.T) {
	for in, want := range map[string]string{
		"1391234567":   "has 10 digits, needs 11 starting with 1",
		"12345":        "has 5 digits, needs 11 starting with 1",
		"139123456789": "has 12 digits, needs 11 starting with 1",
		"23912345678":  "starts with 2, needs 11 digits starting with 1",
		"12912345678":  "starts with 12, needs 13 to 19",
		"1391234567x":  `has 'x', which is not a digit; needs 11 digits starting with 1`,
	} {
		require.False(t, phoneDigits.MatchString(in), in)
		require.Equal(t, want, phoneProblem(in), in)
	}
}
