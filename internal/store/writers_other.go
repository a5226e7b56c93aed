//go:build !unix

package store

import "os"

const flockSupported = false

func flock(*os.File, bool) error { return nil }
