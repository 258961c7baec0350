package pgcluster

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// A cluster directory without owner.pid (left by an older pgadmit, which wrote none, or by a
// process that died between creating it and writing the file) is removed once it is older than
// ownerlessAge and no live server runs in it; a recent one, or one whose server runs, is kept.
func TestSweepStaleRemovesOldOwnerlessDirectories(t *testing.T) {
	t.Parallel()
	bin, err := findBinDir()
	if err != nil {
		t.Skip(err)
	}
	// A directory of the test's own: every other process that starts a throwaway cluster sweeps
	// the shared temporary directories, and one removing a stale cluster directory there empties
	// it first, which makes it recent to this sweep until the other has removed it: CI saw this
	// test find a directory "not removed" that way.
	parent := t.TempDir()
	old := time.Now().Add(-ownerlessAge - time.Hour)
	// fabricate makes an ownerless directory; postmasterPid > 0 writes data/postmaster.pid
	// with that pid as its first line, as a server does.
	fabricate := func(postmasterPid int, mtime time.Time) string {
		t.Helper()
		root, err := os.MkdirTemp(parent, dirPrefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(root) })
		data := filepath.Join(root, "data")
		if err := os.Mkdir(data, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "PG_VERSION"), []byte("15\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		paths := []string{filepath.Join(data, "PG_VERSION"), data, root}
		if postmasterPid > 0 {
			pidFile := filepath.Join(data, "postmaster.pid")
			if err := os.WriteFile(pidFile, []byte(strconv.Itoa(postmasterPid)+"\n"+data+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			paths = append([]string{pidFile}, paths...)
		}
		for _, p := range paths {
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	deadPid := 1 << 30                     // above any pid_max
	gone := fabricate(0, old)              // no server, old: removed
	crashed := fabricate(deadPid, old)     // its server died, old: removed
	running := fabricate(os.Getpid(), old) // a live process in postmaster.pid: kept
	recent := fabricate(0, time.Now())     // may be being set up: kept

	sweepStaleIn([]string{parent}, filepath.Join(bin, "pg_ctl"), nil)
	for _, dir := range []string{gone, crashed} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("old ownerless %s not removed (stat: %v)", dir, err)
		}
	}
	for _, dir := range []string{running, recent} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("ownerless %s removed, want it kept: %v", dir, err)
		}
	}
}
