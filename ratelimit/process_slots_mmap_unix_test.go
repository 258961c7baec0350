//go:build unix

package ratelimit_test

import (
	"os"
	"syscall"
)

// mapShared maps the first size bytes of f, readable and writable, shared with every process
// that maps the file.
func mapShared(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
}

// unmapShared undoes mapShared.
func unmapShared(mem []byte) error { return syscall.Munmap(mem) }
