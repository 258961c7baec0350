package main

import (
	"context"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// A sweeper started behind PgBouncer in transaction mode with pgx's default exec mode warns at
// start-up, as doctor does, and says what to add to the connection string. It used to run
// silently: its passes work while it has the proxy to itself, and fail, months later, once
// other clients share the proxy's sessions. With default_query_exec_mode=exec it warns of
// nothing, and its passes run.
func TestRecoverSweeperBehindPgBouncerChecksTheExecMode(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewPoolerURL(t)
	for _, c := range []struct {
		url  string
		warn bool
	}{{pooled, true}, {pooled + "&default_query_exec_mode=exec", false}} {
		// Stopped once a pass ended (any warning comes before the first pass), not after a
		// fixed time: under load the first pass could end after the 800ms this test used to give.
		sweeper := startCLI(t, context.Background(), "--database-url", c.url, "recover", "--every", "100ms")
		awaitLog(t, &sweeper.stdout, `recover: (nothing to recover|released|pass failed)`)
		code := sweeper.stop()
		stdout, stderr := &sweeper.stdout, &sweeper.stderr
		if code != exitOK {
			t.Fatalf("recover --every: exit %d, stderr %q", code, stderr.String())
		}
		warned := strings.HasPrefix(stderr.String(), "pgadmit recover: warning: ") && strings.Contains(stderr.String(), "default_query_exec_mode=exec")
		if warned != c.warn || (!c.warn && stderr.String() != "") {
			t.Errorf("recover --every on %s: stderr %q, want a warning: %v", c.url, stderr.String(), c.warn)
		}
		if !c.warn {
			assertSweeperLog(t, stdout.String(), `recover: nothing to recover \(\d+(\.\d+)?m?s\)$`)
		}
	}
}
