// Package pgcluster starts throwaway local PostgreSQL clusters: initdb into a temporary
// directory, a server on 127.0.0.1 at a free port (TCP only, no Unix socket) with trust
// authentication, and, on Stop, an immediate shutdown and the removal of the directory. By
// default a cluster is built for tests: in memory (/dev/shm) when it can be, durability off.
// Option OnDisk makes one whose commits cost what they cost on a real server, and Preload loads
// libraries such as pg_stat_statements.
//
// The tests (package pgtest) and the commands that must run on a fresh machine without a
// database (`pgadmit demo`, `pgadmit bench`) use it:
//
//	c, err := pgcluster.Start(ctx, pgcluster.OnDisk(), pgcluster.Preload("pg_stat_statements"))
//	if err != nil {
//		return err // errors.Is(err, pgcluster.ErrNoPostgres) when PostgreSQL is not installed
//	}
//	defer c.Stop()
//	pool, err := pgxpool.New(ctx, c.URL())
//
// It needs PostgreSQL's server binaries (initdb, pg_ctl, postgres), found through `pg_config
// --bindir`, PATH, or Debian's /usr/lib/postgresql/*/bin. Running as root, which initdb and
// postgres refuse, it runs them as the "postgres" system user. The server runs in its own
// process group, so a terminal's Ctrl-C reaches only the program, which then calls Stop. A
// cluster whose owning process died without stopping it is removed by the next Start; so is a
// directory without an owner file (an older pgadmit's) that no live server uses and that has not
// changed for a day.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgadmit/pgadmit/internal/process"
	"github.com/pgadmit/pgadmit/internal/runecut"
)

// ErrNoPostgres is returned by Start when no PostgreSQL server binaries can be found.
var ErrNoPostgres = errors.New("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found on PATH, " +
	"in `pg_config --bindir` or in /usr/lib/postgresql/*/bin: install PostgreSQL " +
	"(e.g. `apt-get install postgresql`) or set DATABASE_URL " +
	"(e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")

// Connection settings of every cluster: the superuser created by initdb and its database.
const (
	User     = "postgres"
	Database = "postgres"
	Host     = "127.0.0.1"
)

// dirPrefix names the temporary directories of throwaway clusters, under one of tempDirs.
const dirPrefix = "pgadmit-pgtest-"

// ownerFile, inside a cluster directory, holds the pid of the process that started it, so a
// later process can tell a cluster whose owner died from one still in use.
const ownerFile = "owner.pid"

// Cluster is a running throwaway cluster. Its methods are safe for concurrent use.
type Cluster struct {
	root    string              // temporary directory: data/, logs
	data    string              // data directory, root/data
	pgCtl   string              // path of pg_ctl
	cred    *process.Credential // user to run the binaries as when this process is root, else nil
	port    int
	startup time.Duration

	durable   bool     // fsync and synchronous_commit on
	inMemory  bool     // root is on a memory-backed file system
	preloaded []string // shared_preload_libraries

	stopOnce sync.Once
	stopErr  error
}

// Start initializes and starts a throwaway cluster listening on 127.0.0.1 at a free port, with
// max_connections 300. By default it lives in /dev/shm when that has room for it (1 GB free;
// else in os.TempDir()), with durability switched off (fsync, synchronous_commit and
// full_page_writes off: nothing in it is worth keeping); see the options for other choices. When ctx ends before the server is up, Start stops what
// it started and returns ctx's error. The caller must Stop the cluster.
func Start(ctx context.Context, opts ...Option) (*Cluster, error) {
	start := time.Now()
	var set settings
	for _, o := range opts {
		o(&set)
	}
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := RunAs()
	if err != nil {
		return nil, err
	}
	pgCtl := filepath.Join(bin, "pg_ctl")
	sweepStale(pgCtl, cred)

	dirs := memoryDirs()
	if set.onDisk {
		dirs = diskDirs()
	}
	var root string
	for _, dir := range dirs {
		if root, err = os.MkdirTemp(dir, dirPrefix); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("throwaway cluster: %w", err)
	}
	c := &Cluster{root: root, data: filepath.Join(root, "data"), pgCtl: pgCtl, cred: cred,
		durable: set.onDisk, inMemory: inMemory(root), preloaded: availableLibraries(bin, set.preload)}
	fail := func(err error) (*Cluster, error) {
		stopErr := c.Stop() // said, not dropped: a directory left behind must be known
		if ctx.Err() != nil {
			return nil, errors.Join(fmt.Errorf("throwaway cluster: %w", ctx.Err()), stopErr)
		}
		return nil, errors.Join(fmt.Errorf("throwaway cluster in %s: %w", root, err), stopErr)
	}
	// The postgres user must be able to reach and write the directory.
	if err := os.Chmod(root, 0o755); err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := os.Chown(root, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail(err)
	}

	if err := c.run(ctx, filepath.Join(bin, "initdb"),
		"-D", c.data, "-U", User, "--auth=trust", "--no-sync", "-E", "UTF8", "--no-locale",
	); err != nil {
		return fail(err)
	}

	// The free port may be taken between choosing and binding it: try a few.
	for attempt := 1; ; attempt++ {
		c.port, err = FreePort()
		if err != nil {
			return fail(err)
		}
		err = c.startServer(ctx)
		if err == nil {
			break
		}
		if attempt == 3 || ctx.Err() != nil {
			return fail(err)
		}
	}
	c.startup = time.Since(start)
	return c, nil
}

// startServer starts the server of the initialized cluster on c.port. It opens no Unix socket
// (an empty -k): clients connect over TCP, and a socket in c.root failed wherever TMPDIR pointed
// at a path that holds a quote (pg_ctl hands -o to a shell), a comma (unix_socket_directories is
// a list), or that is long (a socket's path has at most 107 bytes). The data directory and the
// log are named relative to c.root, where run runs pg_ctl: pg_ctl start puts them in double
// quotes in the shell command that starts the server, where a ", $ or ` of TMPDIR's path broke
// the command (or ran one: `...`). The server makes its data directory's path absolute itself,
// with no shell.
func (c *Cluster) startServer(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k '' -c listen_addresses=%s -c max_connections=300", c.port, Host)
	if !c.durable {
		opts += " -F -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if len(c.preloaded) > 0 {
		opts += " -c shared_preload_libraries=" + strings.Join(c.preloaded, ",")
	}
	data, err := filepath.Rel(c.root, c.data)
	if err != nil {
		return err
	}
	const log = "postgres.log"
	if err := c.run(ctx, c.pgCtl, "-D", data, "-l", log, "-o", opts, "-w", "-t", "60", "start"); err != nil {
		return fmt.Errorf("%w\npostgres.log:\n%s", err, Tail(filepath.Join(c.root, log)))
	}
	return nil
}

// Crash stops the server at once, as if its processes had died (pg_ctl stop -m immediate):
// no checkpoint, and whatever the server had not yet written to its WAL files is lost. The
// data directory stays, for Restart. It is not bound to any caller's context: a cancelled
// program must still stop its server (Stop calls it too).
func (c *Cluster) Crash() error {
	return c.run(context.Background(), c.pgCtl, "-D", c.data, "-m", "immediate", "-w", "stop")
}

// Restart starts the server again after Crash, on the same port; it replays the WAL before it
// accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	return c.startServer(ctx)
}

// URL returns the connection string of the cluster's "postgres" database, as its superuser
// "postgres" (trust authentication: no password).
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", User, Host, c.port, Database)
}

// Port returns the TCP port the server listens on, at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir returns the cluster's temporary directory (data directory, logs).
func (c *Cluster) Dir() string { return c.root }

// Startup returns how long Start took.
func (c *Cluster) Startup() time.Duration { return c.startup }

// Durable reports whether the server runs with fsync and synchronous_commit on (OnDisk).
func (c *Cluster) Durable() bool { return c.durable }

// InMemory reports whether the cluster's directory is on a memory-backed file system (tmpfs),
// where writing to disk costs nothing, whatever Durable says.
func (c *Cluster) InMemory() bool { return c.inMemory }

// Preloaded returns the libraries in the server's shared_preload_libraries: those asked for
// with Preload that the installation has.
func (c *Cluster) Preloaded() []string { return slices.Clone(c.preloaded) }

// Stop shuts the server down at once (immediate mode, no checkpoint) and removes the cluster's
// directory. It is safe to call more than once and from several goroutines; later calls return
// the first call's result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Cluster) stop() error {
	var errs []error
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
		if err := c.Crash(); err != nil {
			errs = append(errs, fmt.Errorf("stop throwaway cluster: %w", err))
		}
	}
	if err := os.RemoveAll(c.root); err != nil {
		errs = append(errs, fmt.Errorf("remove throwaway cluster: %w", err))
	}
	return errors.Join(errs...)
}

// sweepStale removes throwaway clusters whose owning process is gone (it panicked, hit a test
// -timeout or was killed): it stops their server and deletes their directory. A directory
// without an owner file is removed only when ownerlessStale says so.
func sweepStale(pgCtl string, cred *process.Credential) { sweepStaleIn(tempDirs(), pgCtl, cred) }

// sweepStaleIn is sweepStale over the clusters in the directories parents (tests give theirs
// one of their own, where no other process's sweep removes what they look at meanwhile).
func sweepStaleIn(parents []string, pgCtl string, cred *process.Credential) {
	var dirs []string
	for _, tmp := range parents {
		found, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
		dirs = append(dirs, found...)
	}
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if errors.Is(err, fs.ErrNotExist) {
			if ownerlessStale(dir, time.Now()) {
				// No server runs in it: nothing to stop, and no signal sent to a reused pid.
				_ = os.RemoveAll(dir)
			}
			continue
		}
		if err != nil {
			continue // not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if !process.Gone(pid) {
			continue // owner alive (or not ours to judge)
		}
		_ = (&Cluster{root: dir, data: filepath.Join(dir, "data"), pgCtl: pgCtl, cred: cred}).Stop()
	}
}

// run runs a PostgreSQL binary in the cluster directory, as c.cred when set, in its own process
// group (a terminal's Ctrl-C reaches the owning process, which then stops the cluster), with PG*
// variables of the environment removed. Output goes to a file, never a pipe: a server started by
// pg_ctl could otherwise hold the pipe open and hang the wait. On failure the output is part of
// the error. When ctx ends, the binary and every process it started in its group are killed.
func (c *Cluster) run(ctx context.Context, name string, args ...string) error {
	outPath := filepath.Join(c.root, filepath.Base(name)+".out")
	out, err := os.Create(outPath)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.root
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	if err := process.AsUser(cmd, c.cred); err != nil {
		return err
	}
	process.OwnGroup(cmd)
	// When ctx ends, kill the whole process group, not the binary alone: initdb runs its backends
	// through a shell and feeds them through a pipe, and a backend whose initdb died goes on
	// writing into the directory that Stop is removing (and then keeps it there).
	cmd.Cancel = func() error { return process.KillGroup(cmd.Process) }
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, Tail(outPath))
	}
	return nil
}

// Tail returns the end of a log file, at most 4000 bytes, for error messages (pgbouncer uses it
// too). It begins where a character does: a cut inside one would leave invalid UTF-8 at the
// start of the message.
func Tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return runecut.Suffix(string(b), 4000)
}

// findBinDir returns a directory holding initdb, pg_ctl and postgres: the one `pg_config
// --bindir` prints, the one of initdb on PATH, or the newest /usr/lib/postgresql/*/bin (Debian's
// layout, which is not on PATH).
func findBinDir() (string, error) {
	var dirs []string
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(pgConfig, "--bindir").Output(); err == nil {
			dirs = append(dirs, strings.TrimSpace(string(out)))
		}
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
		dirs = append(dirs, filepath.Dir(initdb))
	}
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(debian, func(a, b string) int { // newest major version first
		return majorOf(b) - majorOf(a)
	})
	dirs = append(dirs, debian...)
	for _, dir := range dirs {
		if isExec(filepath.Join(dir, "initdb")) && isExec(filepath.Join(dir, "pg_ctl")) &&
			isExec(filepath.Join(dir, "postgres")) {
			return dir, nil
		}
	}
	return "", ErrNoPostgres
}

// majorOf returns the major version in a path like /usr/lib/postgresql/15/bin.
func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// RunAs returns the credential to run PostgreSQL's binaries (and PgBouncer) with: nil unless this
// process is root, which they refuse to run as; then the "postgres" system user.
func RunAs() (*process.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, which initdb and postgres refuse, and there is no "+
			"\"postgres\" system user to run them as (%v): install PostgreSQL "+
			"(e.g. `apt-get install postgresql`) or set DATABASE_URL", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of postgres: %w", err)
	}
	return &process.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", Host+":0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ownerlessAge is how long a cluster directory without an owner file must have been left
// unchanged before sweepStale removes it.
const ownerlessAge = 24 * time.Hour

// ownerlessStale says whether dir, a cluster directory without an owner file, may be removed:
// an older pgadmit wrote none, and a process that dies between creating the directory and
// writing the file leaves none. It may when no server runs in it (data/postmaster.pid is absent,
// or its first line, the postmaster's pid, is no live process) and neither dir, its data
// directory nor the pid file changed within ownerlessAge (initdb or a server starting would
// change them). A server that still runs is left alone: without an owner file nothing tells an
// orphaned one from one in use. Whatever it cannot read or parse makes it keep the directory.
func ownerlessStale(dir string, now time.Time) bool {
	data := filepath.Join(dir, "data")
	pidFile := filepath.Join(data, "postmaster.pid")
	for _, p := range []string{dir, data, pidFile} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) && p != dir {
			continue
		}
		if err != nil || now.Sub(fi.ModTime()) < ownerlessAge {
			return false
		}
	}
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return false
	}
	return process.Gone(pid)
}
