//go:build !unix

package artifact

import "errors"

// freeBytes is not known on this system: the probe's write decides alone.
func freeBytes(string) (uint64, error) {
	return 0, errors.New("free space: not supported on this system")
}
