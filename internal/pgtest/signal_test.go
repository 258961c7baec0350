package pgtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
)

// holdClusterEnv, set to 1 in this test binary's environment, makes it start its throwaway
// cluster, print the cluster's directory and wait (see TestMain): a test signals it there.
const holdClusterEnv = "PGTEST_HOLD_CLUSTER"

// holdCluster is what the test binary does under holdClusterEnv.
func holdCluster() {
	if _, err := startCluster(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	clusterMu.Lock()
	fmt.Println(running.Dir())
	clusterMu.Unlock()
	time.Sleep(time.Minute)
	os.Exit(1)
}

// A test process whose terminal hangs up (SIGHUP) stops and removes its throwaway cluster, as on
// Ctrl-C and SIGTERM, then dies of the signal: it used to die at once, its server running and its
// directory (in /dev/shm: memory) kept until another test process swept them.
func TestHangupStopsTheCluster(t *testing.T) {
	child := exec.Command(os.Args[0])
	child.Env = []string{holdClusterEnv + "=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			child.Env = append(child.Env, kv)
		}
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	dir := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(dir, "/") {
		_ = child.Process.Kill()
		t.Skipf("no throwaway cluster: %q %v", line, err)
	}
	if err := child.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the test process still runs 30s after SIGHUP")
	}
	if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGHUP {
		t.Errorf("the test process ended with %v, want it killed by SIGHUP once its cluster was stopped", child.ProcessState)
	}
	if _, err := os.Stat(dir); err == nil {
		// Stop what the dead process left: the next cluster started sweeps it.
		if c, err := pgcluster.Start(context.Background()); err == nil {
			_ = c.Stop()
		}
		t.Errorf("SIGHUP left the throwaway cluster %s behind", dir)
	}
}
