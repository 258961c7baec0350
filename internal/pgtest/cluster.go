package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/peterldowns/pgtestdb"
)

// dirPrefix names the temporary directories of throwaway clusters, under one of tempDirs.
const dirPrefix = "pgadmit-pgtest-"

// tempDirs returns where a throwaway cluster may live, best first: memory-backed /dev/shm (on a
// disk, even with fsync off, each CREATE DATABASE of a test database takes ~250 ms instead of
// ~25 ms), then os.TempDir().
func tempDirs() []string {
	return []string{"/dev/shm", os.TempDir()}
}

// ownerFile, inside a cluster directory, holds the pid of the test process that started it, so a
// later process can tell a cluster whose owner died from one still in use.
const ownerFile = "owner.pid"

// cluster is a throwaway PostgreSQL cluster started by this test process.
type cluster struct {
	root  string              // temporary directory: data/, the Unix socket, logs
	data  string              // data directory, root/data
	pgCtl string              // path of pg_ctl
	cred  *syscall.Credential // user to run the binaries as when this process is root, else nil
}

var (
	clusterMu sync.Mutex
	running   *cluster // the started cluster, until stopCluster

	// clusterStartup is how long startCluster took; pgtest's own tests report it.
	clusterStartup time.Duration
)

// errNoPostgres is what a test sees when it can find no server to use.
var errNoPostgres = errors.New("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found on PATH, " +
	"in `pg_config --bindir` or in /usr/lib/postgresql/*/bin, and DATABASE_URL is unset: " +
	"install PostgreSQL (e.g. `apt-get install postgresql`) or set DATABASE_URL " +
	"(e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) to a server where " +
	"its role may create roles and databases")

// startCluster initializes and starts a throwaway cluster listening on 127.0.0.1 at a free port,
// with durability switched off (tests do not need it), and returns how to reach it.
func startCluster() (pgtestdb.Config, error) {
	start := time.Now()
	bin, err := findBinDir()
	if err != nil {
		return pgtestdb.Config{}, err
	}
	cred, err := runAs()
	if err != nil {
		return pgtestdb.Config{}, err
	}
	pgCtl := filepath.Join(bin, "pg_ctl")
	sweepStale(pgCtl, cred)

	var root string
	for _, dir := range tempDirs() {
		if root, err = os.MkdirTemp(dir, dirPrefix); err == nil {
			break
		}
	}
	if err != nil {
		return pgtestdb.Config{}, fmt.Errorf("throwaway cluster: %w", err)
	}
	c := &cluster{root: root, data: filepath.Join(root, "data"), pgCtl: pgCtl, cred: cred}
	fail := func(err error) (pgtestdb.Config, error) {
		_ = os.RemoveAll(root)
		return pgtestdb.Config{}, fmt.Errorf("throwaway cluster in %s: %w", root, err)
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

	if err := c.run(filepath.Join(bin, "initdb"),
		"-D", c.data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--no-locale",
	); err != nil {
		return fail(err)
	}

	// The free port may be taken between choosing and binding it: try a few.
	var port int
	for attempt := 1; ; attempt++ {
		port, err = freePort()
		if err != nil {
			return fail(err)
		}
		opts := fmt.Sprintf("-F -p %d -k '%s' -c listen_addresses=127.0.0.1 -c fsync=off "+
			"-c synchronous_commit=off -c full_page_writes=off -c max_connections=300", port, root)
		err = c.run(pgCtl, "-D", c.data, "-l", filepath.Join(root, "postgres.log"),
			"-o", opts, "-w", "-t", "60", "start")
		if err == nil {
			break
		}
		if attempt == 3 {
			return fail(fmt.Errorf("%w\npostgres.log:\n%s", err, tail(filepath.Join(root, "postgres.log"))))
		}
	}

	clusterMu.Lock()
	running = c
	clusterMu.Unlock()
	stopOnSignal()
	clusterStartup = time.Since(start)

	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       "127.0.0.1",
		Port:       strconv.Itoa(port),
		User:       "postgres",
		Database:   "postgres",
		Options:    "sslmode=disable",
	}, nil
}

// stopCluster stops the throwaway cluster, if one runs, and removes its directory. It is safe
// to call more than once and from several goroutines.
func stopCluster() {
	clusterMu.Lock()
	c := running
	running = nil
	clusterMu.Unlock()
	if c != nil {
		c.stop()
	}
}

// stop shuts the cluster down at once (no checkpoint: nothing in it is worth keeping) and
// removes its directory.
func (c *cluster) stop() {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
		_ = c.run(c.pgCtl, "-D", c.data, "-m", "immediate", "-w", "stop")
	}
	_ = os.RemoveAll(c.root)
}

// stopOnSignal stops the cluster when the process is interrupted or terminated, then lets the
// signal take its default course.
func stopOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		stopCluster()
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		if s, ok := sig.(syscall.Signal); ok {
			_ = syscall.Kill(os.Getpid(), s)
		}
		time.Sleep(time.Second) // the default action normally ends the process before this
		os.Exit(1)
	}()
}

// sweepStale removes throwaway clusters whose owning test process is gone (it panicked, hit
// -timeout or was killed): it stops their server and deletes their directory.
func sweepStale(pgCtl string, cred *syscall.Credential) {
	var dirs []string
	for _, tmp := range tempDirs() {
		found, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
		dirs = append(dirs, found...)
	}
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being set up right now, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // owner alive (or not ours to judge)
		}
		(&cluster{root: dir, data: filepath.Join(dir, "data"), pgCtl: pgCtl, cred: cred}).stop()
	}
}

// run runs a PostgreSQL binary in the cluster directory, as c.cred when set, in its own process
// group (a terminal's Ctrl-C reaches the test process, which then stops the cluster), with PG*
// variables of the environment removed. Output goes to a file, never a pipe: a server started by
// pg_ctl could otherwise hold the pipe open and hang the wait. On failure the output is part of
// the error.
func (c *cluster) run(name string, args ...string) error {
	outPath := filepath.Join(c.root, filepath.Base(name)+".out")
	out, err := os.Create(outPath)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(name, args...)
	cmd.Dir = c.root
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, tail(outPath))
	}
	return nil
}

// tail returns the end of a log file, for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
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
	return "", errNoPostgres
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

// runAs returns the credential to run initdb and postgres with: nil unless this process is root,
// which both refuse to run as; then the "postgres" system user.
func runAs() (*syscall.Credential, error) {
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
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
