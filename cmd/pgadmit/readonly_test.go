package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// An operator whose DATABASE_URL points at a hot standby (or a role that may only read) runs
// migrate up or down with a migration to apply or revert: the server refuses the lock row's write,
// as it always will there. The run fails at once, in one line that says the session is read-only
// and where to run it, and migrates nothing, where it said every 5s for 5 minutes that another
// migrator held the lock. recover and prune, which write too, say the same; status and version,
// which only read, work. A sweeper logs each pass as failed, with that advice, and sweeps on.
func TestMigrateOnAReadOnlyDatabaseFailsAtOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	latest := strings.TrimSpace(cliOK(t, "--database-url", dbURL, "migrate", "version"))
	cliOK(t, "--database-url", dbURL, "migrate", "down") // the latest migration pending
	below := strings.TrimSpace(cliOK(t, "--database-url", dbURL, "migrate", "version"))
	if below == latest {
		t.Fatalf("migrate down left version %s", below)
	}
	ro := pgtest.ReadOnlyURL(t, dbURL)

	failsAtOnce := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		start := time.Now()
		code := run(ctx, append([]string{"--database-url", ro}, args...), &out, &errOut, func(string) string { return "" })
		took := time.Since(start)
		what := "pgadmit " + strings.Join(args, " ") + " on a read-only database"
		if code != exitFailure {
			t.Errorf("%s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", what, code, exitFailure, out.String(), errOut.String())
		}
		if took > 5*time.Second {
			t.Errorf("%s took %s, want a failure at once", what, took.Round(time.Millisecond))
		}
		oneLine(t, what+"'s stderr", errOut.String())
		for _, want := range []string{"SQLSTATE 25006", "read-only", "primary"} {
			if !strings.Contains(errOut.String(), want) {
				t.Errorf("%s does not say %q:\n%s", what, want, errOut.String())
			}
		}
		if strings.Contains(errOut.String(), "another migrator") {
			t.Errorf("%s blames another migrator:\n%s", what, errOut.String())
		}
	}
	failsAtOnce("migrate", "up")
	failsAtOnce("migrate", "down")
	if v := strings.TrimSpace(cliOK(t, "--database-url", ro, "migrate", "version")); v != below {
		t.Errorf("migrate version on the read-only database = %q, want %q: nothing migrated", v, below)
	}
	if out := cliOK(t, "--database-url", ro, "migrate", "status"); !strings.Contains(out, "pending") {
		t.Errorf("migrate status on the read-only database shows nothing pending:\n%s", out)
	}

	cliOK(t, "--database-url", dbURL, "migrate", "up")
	failsAtOnce("recover")
	failsAtOnce("prune")

	// A sweeper pointed at a standby logs each pass as failed, with the same advice, and sweeps
	// on: a failover may make that server the primary.
	sweeper := startCLI(t, context.Background(), "--database-url", ro, "recover", "--every", "100ms")
	awaitLog(t, &sweeper.stdout, `(?m)^\S+ recover: pass failed: .*SQLSTATE 25006.*read-only.*primary.*\n`)
	if code := sweeper.stop(); code != exitOK {
		t.Errorf("recover --every on a read-only database, stopped: exit %d\n%s%s", code, sweeper.stdout.String(), sweeper.stderr.String())
	}
}

// demo and bench pointed at a read-only session (a hot standby, default_transaction_read_only
// on) fail at once with the read-only advice, exit 1, having printed nothing on stdout: demo
// ran its whole duration with every request failing, printed a full summary (capacity "back
// 0.0s after the crash") and only then failed; bench ran every workload, each op an error, and
// blamed the checks.
func TestDemoAndBenchOnAReadOnlyDatabaseFailAtOnce(t *testing.T) {
	t.Parallel()
	ro := pgtest.ReadOnlyURL(t, pgtest.NewURL(t))
	for _, args := range [][]string{{"demo", "--duration", "5s"}, {"demo", "--http", "--duration", "5s"}, {"bench", "--duration", "1s"}} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var out, errOut bytes.Buffer
		start := time.Now()
		code := run(ctx, append([]string{"--database-url", ro}, args...), &out, &errOut, func(string) string { return "" })
		took := time.Since(start)
		cancel()
		what := "pgadmit " + strings.Join(args, " ") + " on a read-only database"
		if code != exitFailure || out.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q; want exit %d, nothing on stdout", what, code, out.String(), exitFailure)
		}
		if took > 3*time.Second {
			t.Errorf("%s took %s, want a failure at once", what, took.Round(time.Millisecond))
		}
		oneLine(t, what+"'s stderr", errOut.String())
		for _, want := range []string{"pgadmit " + args[0] + ": ", "may not write", "read-only", "primary", "nothing was written"} {
			if !strings.Contains(errOut.String(), want) {
				t.Errorf("%s does not say %q:\n%s", what, want, errOut.String())
			}
		}
	}
}
