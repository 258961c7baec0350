//go:build !unix

package process

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
)

// Credential is a user (and group) to run a child as, with the fields of Unix's
// syscall.Credential. Off Unix no child can be run as one: AsUser fails.
type Credential struct {
	Uid uint32
	Gid uint32
}

// AsUser makes cmd run as cred; a nil cred leaves it as this process's user, which is all this
// system can do: any other cred is an error (errors.ErrUnsupported). The case does not arise
// on Windows, where nothing runs as root and PostgreSQL's binaries drop an administrator's
// rights themselves.
func AsUser(cmd *exec.Cmd, cred *Credential) error {
	if cred == nil {
		return nil
	}
	return fmt.Errorf("running %s as user %d: %w on %s", cmd.Path, cred.Uid, errors.ErrUnsupported, runtime.GOOS)
}
