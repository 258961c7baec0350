package process

import (
	"os"
	"os/exec"
	"testing"
)

// Gone tells a process that runs (this one) from one that has ended and been waited for (a
// child: this test binary, run to run no test).
func TestGoneTellsAnEndedProcessFromALiveOne(t *testing.T) {
	if Gone(os.Getpid()) {
		t.Errorf("Gone(%d), this process's pid, = true", os.Getpid())
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	if err := child.Run(); err != nil {
		t.Fatal(err)
	}
	if pid := child.Process.Pid; !Gone(pid) {
		t.Errorf("Gone(%d), a child that ended and was waited for, = false", pid)
	}
}
