//go:build !linux

package pgcluster

import "strings"

// inMemory reports whether dir is on a memory-backed file system; off Linux, only /dev/shm is
// taken to be.
func inMemory(dir string) bool { return strings.HasPrefix(dir, "/dev/shm") }
