//go:build !unix

package ratelimit_test

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

// mapShared fails off Unix, where this test maps no shared memory (mmap(2)): the tests of
// several processes (TestExactAcrossProcesses) run on Unix only.
func mapShared(*os.File, int) ([]byte, error) {
	return nil, fmt.Errorf("shared memory between processes: %w on %s", errors.ErrUnsupported, runtime.GOOS)
}

// unmapShared undoes mapShared, which maps nothing here.
func unmapShared([]byte) error { return nil }
