//go:build !unix

package process

import (
	"errors"
	"io/fs"
	"os"
)

// Gone reports whether no process has the id pid, as far as os.FindProcess tells: on Windows,
// when the process cannot be opened for a reason other than a lack of rights. It approximates:
// a process that has exited but that some program still holds a handle to is not gone, and
// where FindProcess always succeeds (Plan 9, WebAssembly), nothing is ever gone. Both err on the
// side of leaving things be.
func Gone(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return !errors.Is(err, fs.ErrPermission)
	}
	_ = p.Release()
	return false
}

// Terminate kills process pid, which need not be a child of this process, at once: off Unix
// there is no signal that asks a process to end.
func Terminate(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	defer p.Release()
	return p.Kill()
}
