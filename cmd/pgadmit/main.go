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
// error. `pgadmit <command> --help` documents each command; so does the README.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGINT and SIGTERM cancel ctx: long-running commands (recover --every, demo, bench) stop
	// cleanly, and a throwaway cluster is removed. Once ctx is cancelled the signals get their
	// default action back, so that a second Ctrl-C ends a cleanup that hangs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
