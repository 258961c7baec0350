//go:build unix

// The test hangs up on withdb (SIGHUP) and kills its process group: Unix only.

package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// runMainEnv, set to 1 in this test binary's environment, makes it run withdb's main with its
// arguments (see TestMain): a test runs withdb so and signals it.
const runMainEnv = "WITHDB_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// A withdb hung up on (SIGHUP: its terminal closed) passes the signal on to its command, as it
// does Ctrl-C and SIGTERM, and drops the database once the command ended: it used to die at
// once, leaving the database on the DATABASE_URL server and its command running.
func TestHangupDropsTheDatabase(t *testing.T) {
	if os.Getenv("DATABASE_URL") == "" {
		t.Skip("needs DATABASE_URL: a throwaway cluster goes with its database")
	}
	if signal.Ignored(syscall.SIGHUP) {
		t.Skip("SIGHUP is ignored here (nohup), and so in withdb")
	}
	child := exec.Command(os.Args[0], "--", "sh", "-c", `printf '%s\n' "$DATABASE_URL"; exec sleep 60`)
	child.Env = append(os.Environ(), runMainEnv+"=1")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its command too, for the cleanup
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL) })
	line, err := bufio.NewReader(out).ReadString('\n')
	url := strings.TrimSpace(line)
	if err != nil || !strings.HasPrefix(url, "postgres") {
		t.Fatalf("withdb's command printed %q, %v; want its DATABASE_URL", line, err)
	}
	if err := child.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("withdb still runs 30s after SIGHUP")
	}
	if code := child.ProcessState.ExitCode(); code != 128+int(syscall.SIGHUP) {
		t.Errorf("withdb exited with %v, want 129: its command's end by SIGHUP, as a shell reports it", child.ProcessState)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err == nil {
		_ = conn.Close(ctx)
	}
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		t.Errorf("connecting to withdb's database %s after SIGHUP: %v; want it dropped (3D000)", url, err)
	}
}
