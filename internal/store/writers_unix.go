//go:build unix

package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

const flockSupported = true

// flock takes (blocking) or lets go f's exclusive lock.
func flock(f *os.File, lock bool) error {
	how := unix.LOCK_UN
	if lock {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
