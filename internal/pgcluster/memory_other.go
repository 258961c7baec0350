//go:build !linux

package pgcluster

import (
	"math"
	"strings"
)

// inMemory reports whether dir is on a memory-backed file system; off Linux, only /dev/shm is
// taken to be.
func inMemory(dir string) bool { return strings.HasPrefix(dir, "/dev/shm") }

// freeBytes returns the space free in dir's file system; off Linux it is not looked at, and
// taken to be enough.
func freeBytes(string) uint64 { return math.MaxUint64 }
