package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
)

// runMainEnv, set to 1 in a test binary's environment, makes that binary run pgadmit's main
// with its arguments instead of the tests (see TestMain): the tests of what only a process can
// see (signals, its standard output closing) run pgadmit as a child process.
const runMainEnv = "PGADMIT_TEST_RUN_MAIN"

// A demo on a throwaway cluster stops as an interrupted one does, and stops and removes its
// cluster, when the reader of its output goes away (`pgadmit demo | head`, or `| less` quit
// early) and when its terminal hangs up (SIGHUP). Before, the Go runtime ended the process at
// its first write to the closed pipe, and SIGHUP's default action ended it too: the server went
// on running, its directory stayed on disk, until a later demo or bench swept it.
func TestDemoWhoseOutputGoesAwayStopsItsCluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, child *exec.Cmd, stdout *bufio.Reader, closeStdout func())
	}{
		{"stdout closed", func(t *testing.T, child *exec.Cmd, stdout *bufio.Reader, closeStdout func()) {
			closeStdout()
		}},
		{"SIGHUP", func(t *testing.T, child *exec.Cmd, stdout *bufio.Reader, closeStdout func()) {
			if err := child.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The cluster goes to TMPDIR: a directory of the test's own, reachable by the
			// postgres user when the test runs as root.
			tmp, err := os.MkdirTemp("/var/tmp", "pgadmit-signals-test-")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(tmp, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sweepClustersIn(t, tmp) })

			child := exec.Command(os.Args[0], "demo", "--duration", "20s", "--instances", "2", "--clients", "2", "--keys", "5")
			child.Env = []string{runMainEnv + "=1", "TMPDIR=" + tmp}
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "TMPDIR=") {
					child.Env = append(child.Env, kv)
				}
			}
			stderr := &syncBuffer{}
			child.Stderr = stderr
			pipe, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := child.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- child.Wait() }()
			t.Cleanup(func() { _ = child.Process.Kill() })

			stdout := bufio.NewReader(pipe)
			for progress := regexp.MustCompile(`^\s+1s\s`); ; {
				line, err := stdout.ReadString('\n')
				if err != nil {
					if strings.Contains(stderr.String(), pgcluster.ErrNoPostgres.Error()) {
						t.Skip(stderr.String())
					}
					t.Fatalf("the demo ended before its first progress line: %v\nstderr:\n%s", err, stderr.String())
				}
				if progress.MatchString(line) {
					break
				}
			}
			if dirs := clustersIn(tmp); len(dirs) != 1 {
				t.Fatalf("the running demo's cluster: %v in %s, want one", dirs, tmp)
			}
			tc.end(t, child, stdout, func() { _ = pipe.Close() })
			go func() { _, _ = stdout.WriteTo(discard{}) }() // a closed pipe reads nothing, at once

			select {
			case err := <-exited:
				code := child.ProcessState.ExitCode()
				if ws, ok := child.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					t.Errorf("the demo was killed by %s (%v), want it to stop as when interrupted", ws.Signal(), err)
				} else if code != exitFailure || !strings.Contains(stderr.String(), "pgadmit demo: interrupted\n") {
					t.Errorf("the demo: exit %d, stderr %q; want exit 1, interrupted", code, stderr.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the demo still runs 30s after its output went away\nstderr:\n%s", stderr.String())
			}
			if dirs := clustersIn(tmp); len(dirs) > 0 {
				t.Errorf("the demo left its throwaway cluster behind: %v\nstderr:\n%s", dirs, stderr.String())
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// clustersIn lists the throwaway clusters' directories in dir.
func clustersIn(dir string) []string {
	found, _ := filepath.Glob(filepath.Join(dir, "pgadmit-pgtest-*"))
	return found
}

// sweepClustersIn stops and removes the clusters a dead process left in dir (a failing test's),
// as the next cluster started does, and then dir.
func sweepClustersIn(t *testing.T, dir string) {
	if len(clustersIn(dir)) > 0 {
		t.Setenv("TMPDIR", dir)
		if c, err := pgcluster.Start(context.Background(), pgcluster.OnDisk()); err == nil {
			_ = c.Stop()
		}
	}
	_ = os.RemoveAll(dir)
}
