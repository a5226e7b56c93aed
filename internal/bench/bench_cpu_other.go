//go:build !unix

package bench

import "time"

// processCPU: this system's CPU time of a process is not read here.
func processCPU() (time.Duration, bool) { return 0, false }
