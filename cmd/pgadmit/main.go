// Command pgadmit operates pgadmit's admission-control tables in PostgreSQL: it applies the
// migrations, recovers the capacity that dead gateway processes held, prunes old rows, checks
// that the books balance, shows what the limits hold right now, and runs a demo and a
// benchmark.
//
// Usage:
//
//	pgadmit [global flags] <command> [flags]
//
// Commands: migrate, recover, prune, doctor, inspect, demo, bench. The database comes from
// --database-url or DATABASE_URL; demo and bench start a throwaway local cluster when neither is
// set. Exit codes: 0 success, 1 failure (doctor problems and bench checks included), 2 usage
// error. `pgadmit <command> --help` documents each command; so does docs/cli.md.
package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
)

func main() {
	// SIGINT and SIGTERM cancel ctx: long-running commands (recover --every, demo, bench) stop
	// cleanly, and a throwaway cluster is removed. So does SIGHUP (the terminal closed), unless
	// it is ignored (nohup), and so does the reader of stdout going away (`pgadmit demo | head`):
	// left to their default action, both ended the process with its cluster still running. Once
	// ctx is cancelled the signals get their default action back, so that a second Ctrl-C ends a
	// cleanup that hangs.
	ctx, stop := signal.NotifyContext(context.Background(), pgcluster.StopSignals()...)
	ctx, cancel := context.WithCancel(ctx)
	context.AfterFunc(ctx, stop)
	// A write to a closed pipe then fails with EPIPE, which cancels ctx, instead of the runtime
	// ending the process on SIGPIPE.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	code := run(ctx, os.Args[1:], &cancelOnBrokenPipe{w: os.Stdout, cancel: cancel}, os.Stderr, os.Getenv)
	cancel()
	os.Exit(code)
}

// cancelOnBrokenPipe writes to w, and cancels when a write finds that nobody reads w any more.
type cancelOnBrokenPipe struct {
	w      io.Writer
	cancel context.CancelFunc
}

func (c *cancelOnBrokenPipe) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		c.cancel()
	}
	return n, err
}
