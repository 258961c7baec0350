//go:build !unix

package process

import (
	"os"
	"os/exec"
)

// OwnGroup does nothing off Unix, which has no process groups: cmd shares this process's
// console, and a Ctrl-C there may reach it too.
func OwnGroup(*exec.Cmd) {}

// KillGroup kills p alone: off Unix there is no group to kill, and a process p started lives on.
func KillGroup(p *os.Process) error { return p.Kill() }

// TerminateGroup kills p alone, at once: off Unix there is no signal that asks a process to end
// (and no group), so p gets no chance to clean up, and a process p started lives on.
func TerminateGroup(p *os.Process) error { return p.Kill() }
