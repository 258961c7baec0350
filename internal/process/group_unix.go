//go:build unix

package process

import (
	"os"
	"os/exec"
	"syscall"
)

// OwnGroup makes cmd, not yet started, the leader of a new process group, which the processes
// it starts join: a terminal's Ctrl-C, sent to the terminal's foreground group, does not reach
// them, and KillGroup and TerminateGroup reach all of them.
func OwnGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// KillGroup kills (SIGKILL) every process in the group that p, started with OwnGroup, leads.
func KillGroup(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGKILL) }

// TerminateGroup asks (SIGTERM) every process in the group that p, started with OwnGroup,
// leads to end.
func TerminateGroup(p *os.Process) error { return syscall.Kill(-p.Pid, syscall.SIGTERM) }
