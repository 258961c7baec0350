package pgcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Option changes how Start sets up a cluster. Without options a cluster is built for tests:
// in memory when it can be, durability off.
type Option func(*settings)

type settings struct {
	onDisk  bool
	preload []string
}

// OnDisk puts the cluster in a directory on disk ($TMPDIR when set, else /var/tmp) and keeps
// PostgreSQL's durability on (fsync, synchronous_commit and full_page_writes as a server has
// them by default), so that a commit waits for its WAL flush as it would on a real server. For
// measurements (`pgadmit bench`) and demonstrations; tests want the default, which is faster.
func OnDisk() Option { return func(s *settings) { s.onDisk = true } }

// Preload adds libraries, such as "pg_stat_statements", to the server's
// shared_preload_libraries when the local PostgreSQL installation has them; the others are
// skipped, not an error. Cluster.Preloaded says which were loaded.
func Preload(libs ...string) Option {
	return func(s *settings) {
		for _, lib := range libs {
			if lib != "" && !slices.Contains(s.preload, lib) {
				s.preload = append(s.preload, lib)
			}
		}
	}
}

// shmDir is the memory-backed directory where a test cluster lives when it can (a variable for
// the tests).
var shmDir = "/dev/shm"

// memoryRoom is the free space shmDir must have for a test cluster to live there: a cluster takes
// 39 MB once started, each database 8 MB more, and its WAL may grow to max_wal_size (1 GB by
// default) between checkpoints. Docker gives a container a /dev/shm of 64 MB, which a cluster
// filled with its fourth database.
const memoryRoom = 1 << 30

// memoryDirs returns where a test cluster may live, best first: memory-backed /dev/shm when it
// has room for one (on a disk, even with fsync off, each CREATE DATABASE takes ~250 ms instead of
// ~25 ms), then os.TempDir().
func memoryDirs() []string {
	if freeBytes(shmDir) < memoryRoom {
		return []string{os.TempDir()}
	}
	return []string{shmDir, os.TempDir()}
}

// diskDirs returns where an OnDisk cluster may live, best first: $TMPDIR when set (the user's
// choice), then /var/tmp (on disk by convention, where /tmp may be a tmpfs), then os.TempDir().
func diskDirs() []string {
	var dirs []string
	if d := os.Getenv("TMPDIR"); d != "" {
		dirs = append(dirs, d)
	}
	return append(dirs, "/var/tmp", os.TempDir())
}

// tempDirs returns every directory a throwaway cluster may live in, for sweeping stale ones:
// shmDir too when it has no room now.
func tempDirs() []string {
	var out []string
	for _, d := range append([]string{shmDir, os.TempDir()}, diskDirs()...) {
		d = filepath.Clean(d)
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// availableLibraries returns those of libs whose shared library the installation of the server
// binaries in binDir has.
func availableLibraries(binDir string, libs []string) []string {
	dirs := libDirs(binDir)
	var out []string
	for _, lib := range libs {
		for _, dir := range dirs {
			if hasLibrary(dir, lib) {
				out = append(out, lib)
				break
			}
		}
	}
	return out
}

// libDirs returns where the libraries of the installation in binDir may be: pg_config's
// --pkglibdir when that pg_config belongs to binDir, and binDir's sibling lib/ (Debian's
// /usr/lib/postgresql/N/lib, a source build's /usr/local/pgsql/lib).
func libDirs(binDir string) []string {
	var dirs []string
	for _, pgConfig := range []string{filepath.Join(binDir, "pg_config"), "pg_config"} {
		path, err := exec.LookPath(pgConfig)
		if err != nil {
			continue
		}
		out, err := exec.Command(path, "--bindir", "--pkglibdir").Output()
		lines := strings.Fields(string(out))
		if err == nil && len(lines) == 2 && filepath.Clean(lines[0]) == filepath.Clean(binDir) {
			dirs = append(dirs, lines[1])
			break
		}
	}
	return append(dirs, filepath.Join(filepath.Dir(binDir), "lib"))
}

// hasLibrary reports whether dir holds the shared library lib.
func hasLibrary(dir, lib string) bool {
	for _, ext := range []string{".so", ".dylib"} {
		if fi, err := os.Stat(filepath.Join(dir, lib+ext)); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}
