//go:build unix

package process

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// AsUser and OwnGroup, called in either order, both take effect: neither replaces what the
// other set in cmd.SysProcAttr.
func TestAsUserAndOwnGroupCompose(t *testing.T) {
	cred := &Credential{Uid: 12345, Gid: 12345}
	for name, setUp := range map[string]func(*exec.Cmd) error{
		"AsUser first": func(cmd *exec.Cmd) error {
			err := AsUser(cmd, cred)
			OwnGroup(cmd)
			return err
		},
		"OwnGroup first": func(cmd *exec.Cmd) error {
			OwnGroup(cmd)
			return AsUser(cmd, cred)
		},
	} {
		cmd := exec.Command("true")
		if err := setUp(cmd); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a := cmd.SysProcAttr; a == nil || a.Credential != cred || !a.Setpgid {
			t.Errorf("%s: SysProcAttr %+v, want Credential %p and Setpgid", name, a, cred)
		}
	}
}

// A child started with OwnGroup leads a group of its own, and KillGroup and TerminateGroup
// end every process in it: a shell and the sleep it started in the background, which holds
// the shell's standard output open until it too has ended.
func TestGroupSignalsReachTheWholeGroup(t *testing.T) {
	for name, end := range map[string]func(*os.Process) error{
		"KillGroup":      KillGroup,
		"TerminateGroup": TerminateGroup,
	} {
		t.Run(name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			cmd := exec.Command("sh", "-c", "sleep 60 & echo started; wait")
			cmd.Stdout = w
			OwnGroup(cmd)
			err = cmd.Start()
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			defer func() { <-done }()
			if pgid, err := syscall.Getpgid(cmd.Process.Pid); err != nil || pgid != cmd.Process.Pid {
				t.Errorf("the child's process group: %d, %v; want its own, %d", pgid, err, cmd.Process.Pid)
			}
			out := bufio.NewReader(r)
			if line, err := out.ReadString('\n'); line != "started\n" {
				_ = KillGroup(cmd.Process)
				t.Fatalf("the shell printed %q, %v; want started", line, err)
			}
			if err := end(cmd.Process); err != nil {
				_ = KillGroup(cmd.Process)
				t.Fatal(err)
			}
			// EOF once every process holding the pipe (the shell and its sleep) has ended.
			if err := r.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			if rest, err := io.ReadAll(out); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					_ = KillGroup(cmd.Process)
				}
				t.Errorf("after %s, reading the group's output: %q, %v; want EOF", name, rest, err)
			}
		})
	}
}
