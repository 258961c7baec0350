//go:build unix

package process

import (
	"os/exec"
	"syscall"
)

// Credential is a user (and group) to run a child as.
type Credential = syscall.Credential

// AsUser makes cmd, not yet started, run as cred; a nil cred leaves it as this process's user.
func AsUser(cmd *exec.Cmd, cred *Credential) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = cred
	return nil
}
