// Command withdb runs a command with DATABASE_URL set to a fresh database migrated to pgadmit's
// latest schema, then drops that database. The server is the one of DATABASE_URL when it is set,
// else a throwaway cluster (see package pgtest), stopped afterwards.
//
// It backs `make sqlc-vet`, whose rule sqlc/db-prepare needs a migrated database:
//
//	go run ./internal/withdb -- bash -c 'cd tools && go tool sqlc -f ../sqlc.yaml vet'
//
// The exit status is the command's.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withdb [--] command [arg...]")
		os.Exit(2)
	}
	code := 0
	err := pgtest.Run(func(url string) error {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		// The signals that stop a command (pgcluster.StopSignals: SIGINT, SIGTERM, and SIGHUP
		// unless ignored) go to the command, whose end withdb waits for, so that the database
		// is dropped whatever way the command ends: left to their default, a terminal's Ctrl-C
		// or hang-up ended withdb at once and left the database on the DATABASE_URL server.
		// They are caught from before the command starts, so that one sent once it runs is
		// never missed. (A throwaway cluster is stopped on them by package pgtest.)
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, pgcluster.StopSignals()...)
		defer signal.Stop(sigs)
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() {
			for sig := range sigs {
				_ = cmd.Process.Signal(sig)
			}
		}()
		err := cmd.Wait()
		signal.Stop(sigs)
		close(sigs)
		if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
			code = exit.ExitCode()
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal()) // as a shell reports it; ExitCode says -1
			}
			return nil
		}
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "withdb:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
