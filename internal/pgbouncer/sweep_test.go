package pgbouncer

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A stale directory (its owner gone) whose pgbouncer.pid names a process that is not that
// directory's PgBouncer (PgBouncer was killed without removing its pid file, and the pid was
// given to another process since) is removed without signalling that process: sweepStale must
// end only the PgBouncer it started.
func TestSweepStaleSignalsOnlyItsPgBouncer(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = other.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = other.Process.Kill()
		<-exited
	})

	dir, err := os.MkdirTemp(os.TempDir(), dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	write := func(name string, pid int) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(ownerFile, dead.Process.Pid)
	write("pgbouncer.pid", other.Process.Pid)

	sweepStale()
	select {
	case <-exited:
		t.Fatalf("sweepStale ended process %d, which is no PgBouncer of %s (%v)", other.Process.Pid, dir, other.ProcessState)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("stale directory %s after sweepStale: %v", dir, err)
	}

	// A PgBouncer whose owner is gone is still ended.
	b, err := Start(context.Background(), Config{ServerPort: 5432, Users: map[string]string{"postgres": ""}})
	if errors.Is(err, ErrNoPgBouncer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	if err := os.WriteFile(filepath.Join(b.Dir(), ownerFile), []byte(strconv.Itoa(dead.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	sweepStale()
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		t.Errorf("the PgBouncer of %s, whose owner is gone, still runs after sweepStale", b.Dir())
	}
}
