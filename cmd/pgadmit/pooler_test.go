package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgbouncer"
	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// Every command that talks to the database works through PgBouncer in transaction pooling mode
// once the connection string asks for pgx's exec mode; doctor spots the connection string that
// does not, and says what to add.
func TestCommandsBehindPgBouncer(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewPoolerURL(t)
	out, _, code := cli(t, nil, "--database-url", pooled, "doctor")
	if code != exitFailure || !strings.Contains(out, "default_query_exec_mode=exec") {
		t.Fatalf("doctor with pgx's default exec mode behind PgBouncer: exit %d, want 1 and advice\n%s", code, out)
	}

	url := pooled + "&default_query_exec_mode=exec"
	if out := cliOK(t, "--database-url", url, "migrate", "down", "--to", "0"); !strings.Contains(out, "schema version 0") {
		t.Errorf("migrate down --to 0:\n%s", out)
	}
	latest := "schema version "
	if out := cliOK(t, "--database-url", url, "migrate", "up"); !strings.Contains(out, "up   00001_init.sql") || !strings.Contains(out, latest) {
		t.Errorf("migrate up:\n%s", out)
	}
	if out := cliOK(t, "--database-url", url, "migrate", "status"); strings.Contains(out, "pending") {
		t.Errorf("migrate status after up:\n%s", out)
	}
	if v := strings.TrimSpace(cliOK(t, "--database-url", url, "migrate", "version")); v == "0" {
		t.Errorf("migrate version = %s", v)
	}
	for range 3 {
		if out := cliOK(t, "--database-url", url, "recover"); !strings.HasPrefix(out, "nothing to recover") {
			t.Errorf("recover:\n%s", out)
		}
	}
	if out := cliOK(t, "--database-url", url, "prune"); !strings.HasPrefix(out, "pruned before ") {
		t.Errorf("prune:\n%s", out)
	}
	if out := cliOK(t, "--database-url", url, "doctor"); out != "doctor: the books balance\n" {
		t.Errorf("doctor:\n%s", out)
	}
	cliOK(t, "--database-url", url, "inspect")
}

// Behind a PgBouncer in session mode, doctor with pgx's default exec mode says that it could
// not tell whether the pooler keeps one session per connection, and goes on to check the books.
func TestDoctorBehindPgBouncerInSessionMode(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewPoolerURLIn(t, "session", pgtest.PoolerSize)
	out, _, code := cli(t, nil, "--database-url", pooled, "doctor")
	if code != 0 || !strings.Contains(out, "could not tell") || !strings.HasSuffix(out, "doctor: the books balance\n") {
		t.Fatalf("doctor with pgx's default exec mode behind PgBouncer in session mode: exit %d, want 0, a warning and the books\n%s", code, out)
	}
}

// Behind a PgBouncer in statement mode, doctor says that pgadmit needs transactions and exits 1,
// whatever the exec mode.
func TestDoctorBehindPgBouncerInStatementMode(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewPoolerURLIn(t, "statement", pgtest.PoolerSize)
	out, _, code := cli(t, nil, "--database-url", pooled+"&default_query_exec_mode=exec", "doctor")
	if code != exitFailure || !strings.Contains(out, "pool_mode = transaction") {
		t.Fatalf("doctor behind PgBouncer in statement mode: exit %d, want 1 and advice\n%s", code, out)
	}
}

// Behind a PgBouncer in statement mode, migrate fails at the first migration that runs in a
// transaction and says what to change, where it used to print PgBouncer's error alone.
func TestMigrateBehindPgBouncerInStatementMode(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewPoolerURLIn(t, "statement", pgtest.PoolerSize)
	_, errOut, code := cli(t, nil, "--database-url", pooled+"&default_query_exec_mode=exec", "migrate", "down", "--to", "0")
	if code == 0 || !strings.Contains(errOut, "transaction blocks not allowed in statement pooling mode") || !strings.Contains(errOut, "pool_mode = transaction") {
		t.Fatalf("migrate down behind PgBouncer in statement mode: exit %d, want a failure and advice\n%s", code, errOut)
	}
}

// The same on a database pgadmit never migrated, the first command a new deployment runs: goose
// creates its version table in a transaction, which PgBouncer refuses by closing the connection,
// and migrate up said only "failed to initialize: check if version table exists: ... driver: bad
// connection".
func TestMigrateUpOfAFreshDatabaseBehindPgBouncerInStatementMode(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewEmptyPoolerURLIn(t, "statement", pgtest.PoolerSize)
	_, errOut, code := cli(t, nil, "--database-url", pooled+"&default_query_exec_mode=exec", "migrate", "up")
	if code == 0 || !strings.Contains(errOut, "transaction blocks not allowed in statement pooling mode") || !strings.Contains(errOut, "pool_mode = transaction") {
		t.Fatalf("migrate up of a fresh database behind PgBouncer in statement mode: exit %d, want a failure and advice\n%s", code, errOut)
	}
}

// Behind PgBouncer in transaction mode with pgx's default exec mode, migrate and inspect, whose
// statements do not go through ratelimit, fail now and then on one of pgx's cached statements,
// and say what to add to the connection string, as recover and prune do; they used to print
// the server's "prepared statement ... already exists" alone.
func TestMigrateAndInspectBehindPgBouncerSayWhatToChange(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewPoolerURL(t)
	failed := 0
	for i := range 8 {
		args := [][]string{{"migrate", "version"}, {"migrate", "status"}, {"inspect"}, {"migrate", "up"}}[i%4]
		_, errOut, code := cli(t, nil, append([]string{"--database-url", pooled}, args...)...)
		if code == exitOK {
			continue
		}
		failed++
		if !strings.Contains(errOut, "stmtcache_") || !strings.Contains(errOut, "add default_query_exec_mode=exec to the connection string") {
			t.Errorf("%v behind PgBouncer with pgx's default exec mode: exit %d, want advice:\n%s", args, code, errOut)
		}
		oneLine(t, "stderr", errOut)
	}
	if failed == 0 {
		t.Skip("no command met a statement another connection had prepared")
	}
}

// bench behind PgBouncer in transaction pooling mode, on a server that preloads
// pg_stat_statements, as a superuser: the workers' sessions cannot get tracking settings of
// their own (PgBouncer refuses unknown startup parameters, and a transaction pooler could not keep
// a setting on one server session anyway), so bench runs them with the server's tracking and
// says so, instead of failing to connect.
func TestBenchBehindPgBouncerWithPgStatStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgtest.OwnCluster(t, pgcluster.Preload("pg_stat_statements"))
	if !slices.Contains(c.Preloaded(), "pg_stat_statements") {
		t.Skip("this PostgreSQL installation has no pg_stat_statements")
	}
	b, err := pgbouncer.Start(ctx, pgbouncer.Config{ServerHost: pgcluster.Host, ServerPort: c.Port(),
		Users: map[string]string{pgcluster.User: ""}, PoolMode: "transaction", PoolSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable&default_query_exec_mode=exec",
		pgcluster.User, pgbouncer.Host, b.Port(), pgcluster.Database)
	out, errOut, code := cli(t, nil, "bench", "--database-url", url, "--workers", "2", "--duration", "300ms", "--only", "W1", "--statements", "3")
	if code != exitOK {
		t.Fatalf("bench behind PgBouncer: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, `server time per statement, from pg_stat_statements `) ||
		!strings.Contains(out, `pg_stat_statements.track is "top": the connection refused it as a startup parameter`) {
		t.Errorf("bench behind PgBouncer does not say that its sessions run with the server's tracking:\n%s", out)
	}
}

// bench behind PgBouncer in transaction mode with pgx's default exec mode: its operations fail
// now and then on one of pgx's cached statements, and each workload's error line says what to
// add to the connection string, as doctor does (ratelimit's PoolerError says it for both).
func TestBenchBehindPgBouncerSaysWhatToChange(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewPoolerURL(t)
	out, errOut, code := cli(t, nil, "--database-url", pooled, "bench", "--workers", "4", "--duration", "300ms",
		"--only", "W1,W3", "--statements", "0")
	if code == exitOK {
		t.Skip("no operation met a statement another connection had prepared")
	}
	if code != exitFailure || errOut != "pgadmit bench: some checks failed (see above)\n" {
		t.Fatalf("bench behind PgBouncer with pgx's default exec mode: exit %d, stderr:\n%s", code, errOut)
	}
	lines := regexp.MustCompile(`(?m)^W\d: \d+ errors, first: .*$`).FindAllString(out, -1)
	if len(lines) == 0 {
		t.Fatalf("bench failed with no error line:\n%s", out)
	}
	for _, l := range lines {
		if !strings.Contains(l, "stmtcache_") || !strings.Contains(l, "add default_query_exec_mode=exec to the connection string") {
			t.Errorf("bench's error line does not say what to change:\n%s", l)
		}
	}
}
