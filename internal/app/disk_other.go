//go:build !unix

package app

import "errors"

// freeBytes is not measured here; /readyz relies on write failures alone.
func freeBytes(string) (uint64, error) {
	return 0, errors.New("free space: not supported on this system")
}
