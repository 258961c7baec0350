package pgcluster

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/schema"
)

// start starts a cluster for one test, skipping the test when PostgreSQL is not installed and
// DATABASE_URL is set (the suite then runs on that server and needs no binaries).
func start(t *testing.T, ctx context.Context, opts ...Option) *Cluster {
	t.Helper()
	c, err := Start(ctx, opts...)
	if errors.Is(err, ErrNoPostgres) && os.Getenv("DATABASE_URL") != "" {
		t.Skipf("no PostgreSQL binaries: %v", err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func TestStartServesAndStopRemoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := start(t, ctx)
	t.Logf("cluster started in %s at %s", c.Startup(), c.URL())

	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatalf("connect to %s: %v", c.URL(), err)
	}
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := conn.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}

	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cluster directory %s still there after Stop (stat: %v)", c.Dir(), err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(cctx, c.URL()); err == nil {
		_ = conn.Close(ctx)
		t.Fatal("server still accepts connections after Stop")
	}
}

func TestTwoClustersAreDistinct(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := start(t, ctx), start(t, ctx)
	if a.Port() == b.Port() || a.Dir() == b.Dir() {
		t.Fatalf("clusters share port %d/%d or directory %s/%s", a.Port(), b.Port(), a.Dir(), b.Dir())
	}
}

func TestStartCancelled(t *testing.T) {
	t.Parallel()
	if _, err := findBinDir(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := Start(ctx)
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestSweepStaleRemovesOrphans(t *testing.T) {
	t.Parallel()
	bin, err := findBinDir()
	if err != nil {
		t.Skip(err)
	}
	// A directory of the test's own, where no other process's sweep removes what this one
	// looks at (see TestSweepStaleRemovesOldOwnerlessDirectories).
	parent := t.TempDir()
	// A directory shaped like a cluster whose owner is gone: a pid that cannot be alive.
	root, err := os.MkdirTemp(parent, dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	deadPid := 1 << 30 // above any pid_max
	if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(deadPid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// One owned by this live process.
	mine, err := os.MkdirTemp(parent, dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(mine) })
	if err := os.WriteFile(filepath.Join(mine, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}

	sweepStaleIn([]string{parent}, filepath.Join(bin, "pg_ctl"), nil)
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan %s not removed (stat: %v)", root, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("live process's cluster %s removed: %v", mine, err)
	}
}

// show returns the value of a server setting.
func show(t *testing.T, ctx context.Context, conn *pgx.Conn, name string) string {
	t.Helper()
	v, err := db.New().BenchServerSetting(ctx, conn, name)
	if err != nil {
		t.Fatalf("setting %s: %v", name, err)
	}
	return v
}

func TestOnDiskAndPreload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := start(t, ctx, OnDisk(), Preload("pg_stat_statements", "pgadmit_no_such_library"))
	t.Logf("on-disk cluster started in %s in %s, preloaded %v", c.Startup(), c.Dir(), c.Preloaded())
	if !c.Durable() || filepath.Dir(c.Dir()) == "/dev/shm" {
		t.Errorf("OnDisk cluster in %s, durable %v", c.Dir(), c.Durable())
	}
	if os.Getenv("TMPDIR") == "" && c.InMemory() {
		t.Errorf("OnDisk cluster in %s is in memory", c.Dir())
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for name, want := range map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"} {
		if got := show(t, ctx, conn, name); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
	}
	if slices.Contains(c.Preloaded(), "pgadmit_no_such_library") {
		t.Errorf("Preloaded() = %v holds a library the installation lacks", c.Preloaded())
	}
	got := show(t, ctx, conn, "shared_preload_libraries")
	if want := strings.Join(c.Preloaded(), ","); got != want {
		t.Errorf("shared_preload_libraries = %q, want %q", got, want)
	}
	bin, _ := findBinDir()
	if hasLibrary(filepath.Join(filepath.Dir(bin), "lib"), "pg_stat_statements") && !slices.Contains(c.Preloaded(), "pg_stat_statements") {
		t.Errorf("pg_stat_statements is installed but not preloaded: %v", c.Preloaded())
	}
}

func TestDefaultIsFastAndVolatile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := start(t, ctx)
	if c.Durable() || len(c.Preloaded()) > 0 {
		t.Errorf("default cluster: durable %v, preloaded %v", c.Durable(), c.Preloaded())
	}
	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if got := show(t, ctx, conn, "fsync"); got != "off" {
		t.Errorf("fsync = %s, want off", got)
	}
}

// Crash stops the server at once and keeps the data directory; Restart replays the WAL and
// serves again on the same port, with what was committed (here: the migrations) still there.
func TestCrashAndRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := start(t, ctx, OnDisk())
	pool, err := pgxpool.New(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	want, err := schema.Version(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Crash(); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	if _, err := schema.Version(ctx, pool); err == nil {
		t.Fatal("the server still answers after Crash")
	}
	if _, err := os.Stat(filepath.Join(c.Dir(), "data", "PG_VERSION")); err != nil {
		t.Fatalf("data directory gone after Crash: %v", err)
	}
	port := c.Port()
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if c.Port() != port {
		t.Errorf("port %d after Restart, want %d", c.Port(), port)
	}
	after, err := pgxpool.New(ctx, c.URL()) // the old pool's connections died with the server
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if got, err := schema.Version(ctx, after); err != nil || got != want {
		t.Errorf("schema version after Restart = %d, %v; want %d", got, err, want)
	}
}

// A Start cancelled while initdb runs (a Ctrl-C of `pgadmit demo` in its first second) leaves
// nothing behind: initdb's children (the backend it feeds through a pipe, and the shell that
// runs it) die with it, so that no process goes on writing in the directory Stop removes, which
// could then not be removed. An orphan that happens to end before Start returns goes unseen, so
// the test cancels several Starts. Not parallel: it points TMPDIR at a directory of its own.
func TestStartCancelledDuringInitdbLeavesNothing(t *testing.T) {
	if _, err := findBinDir(); err != nil {
		t.Skip(err)
	}
	if _, err := os.Stat("/proc/self/wchan"); err != nil {
		t.Skip("needs /proc:", err)
	}
	tmp, err := os.MkdirTemp("/var/tmp", "pgcluster-cancel-test-") // reachable by the postgres user
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	for round := 1; round <= 8 && !t.Failed(); round++ {
		cancelDuringInitdb(t, tmp)
	}
}

// cancelDuringInitdb starts a cluster in tmp, cancels the Start while initdb's bootstrap backend
// has a full pipe of input still to read, and checks that nothing of it remains.
func cancelDuringInitdb(t *testing.T, tmp string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rootc := make(chan string, 1)
	go func() {
		defer close(rootc)
		for ctx.Err() == nil {
			if len(processesIn(tmp, "--boot")) > 0 && blockedOnPipe(processesIn(tmp, "initdb")) {
				found, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
				rootc <- found[0]
				cancel()
				return
			}
			time.Sleep(time.Millisecond) // polling /proc; there is nothing to wait on
		}
	}()
	c, err := Start(ctx, OnDisk())
	cancel() // ends the watch when Start ended on its own
	if err == nil {
		_ = c.Stop()
		t.Skip("initdb finished before the test saw it wait to write to its backend: nothing to cancel")
	}
	root, ok := <-rootc
	if !ok {
		t.Fatalf("Start failed before initdb wrote to its backend: %v", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start cancelled during initdb: %v, want context.Canceled", err)
	}
	for pid, cmdline := range processesIn(root, "") {
		if !dying(pid) {
			t.Errorf("process %d still runs in the cancelled cluster's directory: %q", pid, cmdline)
		}
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		left, _ := filepath.Glob(filepath.Join(root, "*", "*"))
		t.Errorf("cancelled cluster's directory %s left behind (stat: %v), holding %v", root, err, left)
	}
}

// processesIn returns the live processes whose working directory is under dir and whose command
// line contains arg, by pid.
func processesIn(dir, arg string) map[int]string {
	out := map[int]string{}
	cwds, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, p := range cwds {
		cwd, err := os.Readlink(p)
		if err != nil || !strings.HasPrefix(cwd, dir) {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if len(b) == 0 || strings.Contains(string(stat), ") Z ") { // a zombie: it runs no more
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		if strings.Contains(cmdline, arg) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out[pid] = cmdline
		}
	}
	return out
}

// dying reports whether process pid was killed and has yet to end: SIGKILL pending (SigPnd,
// ShdPnd) or its exit begun (PF_EXITING in stat's flags). On a loaded machine a process of the
// group Start killed may still be listed when Start returns (CI once saw initdb's shell and
// backend so); it can do nothing more in the directory, where an orphan would.
func dying(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	status, _ := os.ReadFile(dir + "/status")
	for _, line := range strings.Split(string(status), "\n") {
		name, mask, ok := strings.Cut(line, ":\t")
		if name != "SigPnd" && name != "ShdPnd" || !ok {
			continue
		}
		if bits, err := strconv.ParseUint(mask, 16, 64); err == nil && bits&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	stat, _ := os.ReadFile(dir + "/stat")
	_, fields, _ := strings.Cut(string(stat), ") ")
	if f := strings.Fields(fields); len(f) > 6 { // state ppid pgrp session tty_nr tpgid flags
		flags, err := strconv.ParseUint(f[6], 10, 64)
		return err == nil && flags&pfExiting != 0
	}
	return false
}

// dying tells a process killed and not yet reaped (its exit begun) from one that runs.
func TestDying(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc:", err)
	}
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if dying(cmd.Process.Pid) {
		t.Errorf("a running sleep is dying")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !dying(cmd.Process.Pid) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !dying(cmd.Process.Pid) {
		t.Errorf("a killed sleep is not dying after 5s")
	}
}

// pfExiting is the kernel's PF_EXITING, in /proc/<pid>/stat's flags while a process exits.
const pfExiting = 0x4

// blockedOnPipe reports whether one of pids waits to write into a full pipe (its wchan).
func blockedOnPipe(pids map[int]string) bool {
	for pid := range pids {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/wchan"); strings.Contains(string(b), "pipe_write") {
			return true
		}
	}
	return false
}

// A cluster starts wherever TMPDIR points: in a directory whose name holds a quote, a comma or a
// space, or that is long. The server opens no Unix socket there: its path was given to postgres
// through pg_ctl's shell in single quotes (a quote ended them), as a comma-separated list (a
// comma split it), and a socket's path may be at most 107 bytes. Nor does it break on what a
// shell reads inside double quotes (", $, `): pg_ctl start runs the server through a shell, the
// data directory (-D) and log (-l) in double quotes. Not parallel: it sets TMPDIR.
func TestStartWhereverTMPDIRPoints(t *testing.T) {
	if _, err := findBinDir(); err != nil {
		t.Skip(err)
	}
	for name, dir := range map[string]string{
		"quote": "it's", "comma": "a,b", "space": "a b",
		"long":  strings.Repeat("long-", 16), // its socket's path would be 125 bytes or more
		"shell": `say "$HOME" ` + "`id`",
	} {
		t.Run(name, func(t *testing.T) {
			parent, err := os.MkdirTemp("/var/tmp", "pgcluster-tmpdir-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(parent) })
			tmp := filepath.Join(parent, dir)
			for _, d := range []string{parent, tmp} { // reachable by the postgres user
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("TMPDIR", tmp)
			ctx := context.Background()
			c := start(t, ctx, OnDisk())
			if !strings.HasPrefix(c.Dir(), tmp+"/") {
				t.Errorf("cluster in %s, want it in TMPDIR %s", c.Dir(), tmp)
			}
			conn, err := pgx.Connect(ctx, c.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if got := show(t, ctx, conn, "unix_socket_directories"); got != "" {
				t.Errorf("unix_socket_directories = %q, want none", got)
			}
		})
	}
}

// A test cluster lives in /dev/shm only when it has room for one: Docker gives a container a
// /dev/shm of 64 MB, which a cluster (39 MB once started) filled with its fourth database, and
// every test after that failed ("No space left on device"). It then lives in os.TempDir(). The
// test mounts a /dev/shm of that size of its own (it needs root). Not parallel: it sets shmDir.
func TestSmallShmIsLeftAlone(t *testing.T) {
	if _, err := findBinDir(); err != nil {
		t.Skip(err)
	}
	small, err := os.MkdirTemp("", "pgcluster-small-shm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(small) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,mode=1777", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs of 64 MB: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", small).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", small, err, out)
		}
	})
	defer func(dir string) { shmDir = dir }(shmDir)
	shmDir = small

	c := start(t, context.Background())
	if strings.HasPrefix(c.Dir(), small+"/") {
		t.Errorf("test cluster in %s, a tmpfs of 64 MB, want it in %s", c.Dir(), os.TempDir())
	}
	if !slices.Contains(tempDirs(), small) {
		t.Errorf("tempDirs() = %v leaves out %s, where an earlier cluster may have been left", tempDirs(), small)
	}
}

// Tail keeps the end of a log whole: its cut falls where a character begins, not inside one
// (a server's log quotes names and values in any script).
func TestTailCutsNoCharacter(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "postgres.log")
	// 4001 bytes: the last 4000 begin with the second byte of an é.
	log := "é" + strings.Repeat("a", 3999)
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := Tail(path)
	if !utf8.ValidString(got) {
		t.Fatalf("Tail = %q..., not valid UTF-8", got[:8])
	}
	if want := strings.Repeat("a", 3999); got != want {
		t.Fatalf("Tail: %d bytes, want the last %d (the whole é left out)", len(got), len(want))
	}
}
