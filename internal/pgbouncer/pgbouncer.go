// Package pgbouncer starts a throwaway PgBouncer in front of a PostgreSQL server, the way package
// pgcluster starts a throwaway server: a configuration in a temporary directory, a pgbouncer
// process on 127.0.0.1 at a free port, and, on Stop, the process ended and the directory removed.
//
// pgadmit's tests use it to run every operation through a connection pooler in transaction
// pooling mode, where a client's consecutive transactions may run on different server
// connections, so that no session state survives between them:
//
//	b, err := pgbouncer.Start(ctx, pgbouncer.Config{ServerPort: 5432, Users: map[string]string{"postgres": ""}})
//	if err != nil {
//		return err // errors.Is(err, pgbouncer.ErrNoPgBouncer) when PgBouncer is not installed
//	}
//	defer b.Stop()
//	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:"+strconv.Itoa(b.Port())+"/db?default_query_exec_mode=exec")
//
// It needs the pgbouncer binary (Debian's package pgbouncer), found on PATH or in /usr/sbin.
// PgBouncer refuses to run as root; running as root, it runs pgbouncer as the "postgres" system
// user. A PgBouncer whose owning process died without stopping it is stopped by the next Start.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/process"
)

// ErrNoPgBouncer is returned by Start when no pgbouncer binary can be found.
var ErrNoPgBouncer = errors.New("no pgbouncer binary on PATH or in /usr/sbin: install PgBouncer " +
	"(e.g. `apt-get install pgbouncer`); the tests run every operation through it")

// Host is where every PgBouncer of this package listens.
const Host = "127.0.0.1"

// dirPrefix names the temporary directories of throwaway PgBouncers.
const dirPrefix = "pgadmit-pgbouncer-"

// ownerFile, in a PgBouncer's directory, holds the pid of the process that started it.
const ownerFile = "owner.pid"

// Config says what a PgBouncer pools.
type Config struct {
	// ServerHost and ServerPort locate the PostgreSQL server; every database of it is reachable
	// under its own name (a "*" fallback entry). ServerHost defaults to 127.0.0.1.
	ServerHost string
	ServerPort int
	// Users are the roles clients may log in as, with their passwords (PgBouncer trusts its
	// clients and logs in to the server with these).
	Users map[string]string
	// PoolMode is session, transaction (the default) or statement.
	PoolMode string
	// PoolSize is how many server connections PgBouncer opens per database and user (default
	// 4): fewer than the clients, so that their transactions share server connections.
	PoolSize int
}

// Bouncer is a running throwaway PgBouncer. Its methods are safe for concurrent use.
type Bouncer struct {
	root string
	bin  string              // the pgbouncer binary Start found, which Restart runs again
	cred *process.Credential // whom it runs as (nil: this process's user)
	cmd  *exec.Cmd
	port int
	done chan struct{} // closed when the process has exited

	stopOnce sync.Once
	stopErr  error

	mu      sync.Mutex // held by Restart and Stop: cmd and done change on Restart
	stopped bool
}

// Start writes a configuration for c into a temporary directory and starts pgbouncer on it,
// listening on 127.0.0.1 at a free port; it returns once the port accepts connections. The
// caller must Stop it.
func Start(ctx context.Context, c Config) (*Bouncer, error) {
	bin, err := findBinary()
	if err != nil {
		return nil, err
	}
	cred, err := pgcluster.RunAs()
	if err != nil {
		return nil, err
	}
	sweepStale()
	if c.ServerHost == "" {
		c.ServerHost = "127.0.0.1"
	}
	if c.PoolMode == "" {
		c.PoolMode = "transaction"
	}
	if c.PoolSize == 0 {
		c.PoolSize = 4
	}
	root, err := tempDir()
	if err != nil {
		return nil, fmt.Errorf("throwaway pgbouncer: %w", err)
	}
	b := &Bouncer{root: root, bin: bin, cred: cred}
	fail := func(err error) (*Bouncer, error) {
		_ = b.Stop()
		return nil, fmt.Errorf("throwaway pgbouncer in %s: %w", root, err)
	}
	if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(root, "userlist.txt"), []byte(userList(c.Users)), 0o600); err != nil {
		return fail(err)
	}
	if cred != nil {
		for _, f := range []string{root, filepath.Join(root, "userlist.txt")} {
			if err := os.Chown(f, int(cred.Uid), int(cred.Gid)); err != nil {
				return fail(err)
			}
		}
	}
	// The free port may be taken between choosing and binding it: try a few.
	for attempt := 1; ; attempt++ {
		if b.port, err = pgcluster.FreePort(); err != nil {
			return fail(err)
		}
		ini := filepath.Join(root, "pgbouncer.ini")
		if err := os.WriteFile(ini, []byte(configFile(root, b.port, c)), 0o644); err != nil {
			return fail(err)
		}
		if err = b.run(ctx, ini); err == nil {
			return b, nil
		}
		if attempt == 3 || ctx.Err() != nil {
			return fail(fmt.Errorf("%w\npgbouncer.log:\n%s", err, pgcluster.Tail(filepath.Join(root, "pgbouncer.log"))))
		}
	}
}

// run starts pgbouncer in the foreground, in its own process group, and waits for its port.
func (b *Bouncer) run(ctx context.Context, ini string) error {
	out, err := os.Create(filepath.Join(b.root, "pgbouncer.out"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(b.bin, ini)
	cmd.Dir = b.root
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	if err := process.AsUser(cmd, b.cred); err != nil {
		return err
	}
	process.OwnGroup(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(Host, strconv.Itoa(b.port)), 200*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			b.cmd, b.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("pgbouncer exited: %v\n%s", waitErr, pgcluster.Tail(filepath.Join(b.root, "pgbouncer.out")))
		case <-ctx.Done():
			_ = process.KillGroup(cmd.Process)
			<-done
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = process.KillGroup(cmd.Process)
			<-done
			return errors.New("pgbouncer did not listen within 10 s")
		}
	}
}

// Restart ends PgBouncer at once (SIGTERM: immediate shutdown, every client and server
// connection closed, as a crash or a restart by an operator closes them) and starts it again on
// the same port and configuration; it returns once the port accepts connections again.
func (b *Bouncer) Restart(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return errors.New("throwaway pgbouncer: restart after Stop")
	}
	b.terminate()
	// The port was just released: PgBouncer binds it with SO_REUSEADDR, but try a few times.
	for attempt := 1; ; attempt++ {
		if err := b.run(ctx, filepath.Join(b.root, "pgbouncer.ini")); err == nil {
			return nil
		} else if attempt == 3 || ctx.Err() != nil {
			return fmt.Errorf("restart throwaway pgbouncer in %s: %w", b.root, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Port returns the TCP port PgBouncer listens on, at 127.0.0.1.
func (b *Bouncer) Port() int { return b.port }

// Dir returns the PgBouncer's temporary directory (configuration, log).
func (b *Bouncer) Dir() string { return b.root }

// Stop ends PgBouncer at once (SIGTERM: immediate shutdown, its connections closed) and removes
// its directory. It is safe to call more than once and from several goroutines; later calls
// return the first call's result.
func (b *Bouncer) Stop() error {
	b.stopOnce.Do(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.stopped = true
		var errs []error
		if b.cmd != nil {
			b.terminate()
		}
		if err := os.RemoveAll(b.root); err != nil {
			errs = append(errs, fmt.Errorf("remove throwaway pgbouncer: %w", err))
		}
		b.stopErr = errors.Join(errs...)
	})
	return b.stopErr
}

// terminate ends the running PgBouncer at once (SIGTERM: immediate shutdown, its connections
// closed; SIGKILL if it has not exited 10 s later) and waits for it.
func (b *Bouncer) terminate() {
	_ = process.TerminateGroup(b.cmd.Process)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = process.KillGroup(b.cmd.Process)
		<-b.done
	}
}

// configFile is pgbouncer.ini: every database of the server under its own name, trusted
// clients of the user list, the given pool mode and size, no Unix socket, logs in the
// directory. Server connections are not reset between clients (server_reset_query is empty, as
// PgBouncer's documentation recommends for transaction pooling): session state a client leaves
// on a server connection is seen by the next one, which is what the tests must show pgadmit
// never depends on.
func configFile(root string, port int, c Config) string {
	return fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = %s
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
`, c.ServerHost, c.ServerPort, Host, port, filepath.Join(root, "userlist.txt"), c.PoolMode, c.PoolSize,
		filepath.Join(root, "pgbouncer.log"), filepath.Join(root, "pgbouncer.pid"))
}

// userList is the auth_file: "user" "password" per line, quotes doubled.
func userList(users map[string]string) string {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	names := make([]string, 0, len(users))
	for name := range users {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "%s %s\n", q(name), q(users[name]))
	}
	return b.String()
}

// findBinary returns the pgbouncer binary: on PATH, or where Debian installs it (/usr/sbin,
// which is not on a non-root PATH).
func findBinary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, "pgbouncer")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrNoPgBouncer
}

// tempDir makes the PgBouncer's directory, readable by the user it runs as.
func tempDir() (string, error) {
	var err error
	for _, dir := range []string{"/dev/shm", os.TempDir()} {
		var root string
		if root, err = os.MkdirTemp(dir, dirPrefix); err == nil {
			return root, os.Chmod(root, 0o755)
		}
	}
	return "", err
}

// sweepStale stops the PgBouncers whose owning process is gone and removes their directories.
func sweepStale() {
	var dirs []string
	for _, tmp := range []string{"/dev/shm", os.TempDir()} {
		found, _ := filepath.Glob(filepath.Join(tmp, dirPrefix+"*"))
		dirs = append(dirs, found...)
	}
	for _, dir := range dirs {
		owner, err := readPid(filepath.Join(dir, ownerFile))
		if err != nil || !process.Gone(owner) {
			continue // being set up, not ours, or its owner is alive
		}
		// A PgBouncer killed outright leaves its pid file: the pid may be another process's by
		// now. Only a process that runs this directory's configuration is signalled.
		if pid, err := readPid(filepath.Join(dir, "pgbouncer.pid")); err == nil && runs(pid, filepath.Join(dir, "pgbouncer.ini")) {
			_ = process.Terminate(pid)
		}
		_ = os.RemoveAll(dir)
	}
}

// runs reports whether process pid runs with ini among its arguments (as pgbouncer ini does):
// from /proc where there is one, else from ps. False when neither can tell.
func runs(pid int, ini string) bool {
	var args []string
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); err == nil {
		args = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	} else if _, err := os.Stat("/proc/self"); err == nil {
		return false // Linux: no such process
	} else if out, err := exec.Command("ps", "-o", "args=", "-p", strconv.Itoa(pid)).Output(); err == nil {
		args = strings.Fields(string(out))
	}
	return slices.Contains(args, ini)
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: no pid", path)
	}
	return pid, nil
}
