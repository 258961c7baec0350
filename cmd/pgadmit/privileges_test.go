package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// An operator's sweeper runs as the maintenance role of docs/privileges.sql, which may not
// write a ledger row of its own: doctor, inspect, recover and prune each read the schema's
// version (and warn when a newer pgadmit migrated it) and do their work with its grants, here
// on what a gateway (its own role) left behind when it died: a task whose claim expired,
// holding a reservation and a lease.
func TestMaintenanceCommandsRunAsTheMaintenanceRole(t *testing.T) {
	t.Parallel()
	url, owner := newDatabase(t)
	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, url)
	gateway := pgtest.OpenPool(t, gatewayURL)
	// inspect shows current windows only: the request's window must not end
	// before it runs (a minute's did once in CI, a second past it).
	gatewayRequest(t, gateway, time.Second, readBackWindow(t, gateway))
	time.Sleep(1100 * time.Millisecond) // the task's claim expires

	sweeper := []string{"--database-url", maintenanceURL}
	if out := cliOK(t, append(sweeper, "inspect")...); !strings.Contains(out, "k1") {
		t.Errorf("inspect as the maintenance role does not show the gateway's counter:\n%s", out)
	}
	if out := cliOK(t, append(sweeper, "recover")...); !strings.Contains(out, "released 1 lease and 1 reservation") {
		t.Errorf("recover as the maintenance role:\n%s", out)
	}
	cliOK(t, append(sweeper, "prune", "--older-than", "1s")...)
	if out := cliOK(t, append(sweeper, "doctor")...); !strings.Contains(out, "the books balance") {
		t.Errorf("doctor as the maintenance role:\n%s", out)
	}

	// The gateway's role reads the version (docs/privileges.sql grants it, so that a gateway
	// may call schema.Migrate at start-up): no warning. doctor and inspect only read: the
	// gateway's role runs them too, as docs/dba.md says.
	if _, errOut, code := cli(t, nil, "--database-url", gatewayURL, "inspect"); code != exitOK || errOut != "" {
		t.Errorf("inspect as the gateway's role: exit %d\n%s", code, errOut)
	}
	if out, errOut, code := cli(t, nil, "--database-url", gatewayURL, "doctor"); code != exitOK || errOut != "" || !strings.Contains(out, "the books balance") {
		t.Errorf("doctor as the gateway's role: exit %d\n%s%s", code, out, errOut)
	}
	// A role that may not read the version (the gateway's, once that grant of
	// docs/privileges.sql is revoked) is told that the check was skipped.
	if err := dbtest.New().OpsRevokeGatewayVersionRead(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	_, errOut, _ := cli(t, nil, "--database-url", gatewayURL, "inspect")
	if !strings.Contains(errOut, "cannot read the schema version") || !strings.Contains(errOut, "docs/privileges.sql") {
		t.Errorf("inspect as a role that may not read the schema version:\n%s", errOut)
	}

	// The version it reads is the schema's: a newer pgadmit's migration is seen.
	pgtest.RecordNewerMigration(t, owner, 99999)
	if _, errOut, _ := cli(t, nil, append(sweeper, "doctor")...); !strings.Contains(errOut, "this pgadmit may misread it") {
		t.Errorf("doctor as the maintenance role on a schema a newer pgadmit migrated warns nothing:\n%s", errOut)
	}
}

// A role without docs/privileges.sql's maintenance grants (the gateway's) may not take
// recover's or prune's lease: the run never starts. Nothing it prints may look like work done (a
// prune's cutoff of 0001-01-01, zero counts, a progress line of a batch), one-shot or as a
// sweeper's pass, and its error says that the run did nothing, why, and what grants it needs.
func TestRecoverAndPruneAsARoleWithoutTheirGrants(t *testing.T) {
	t.Parallel()
	url, _ := newDatabase(t)
	gatewayURL, _ := pgtest.LeastPrivilegeURLs(t, url)
	saysWhy := func(what, msg string) {
		t.Helper()
		for _, want := range []string{"did nothing", "SQLSTATE 42501", "pgadmit_maintenance", "docs/privileges.sql"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s does not say %q:\n%s", what, want, msg)
			}
		}
		if strings.Contains(msg, "0001-01-01") {
			t.Errorf("%s shows a zero time:\n%s", what, msg)
		}
	}
	for _, cmd := range []string{"prune", "recover"} {
		out, errOut, code := cli(t, nil, "--database-url", gatewayURL, cmd, "--progress", "1ns")
		if code != exitFailure || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "pgadmit "+cmd+": ") {
			t.Errorf("%s as the gateway's role: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, one line of error", cmd, code, out, errOut)
		}
		saysWhy(cmd+"'s error", errOut)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- run(ctx, []string{"--database-url", gatewayURL, "recover", "--every", "100ms"}, &out, &errOut, func(string) string { return "" })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "pass failed") < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-exited; code != exitOK {
		t.Errorf("recover --every as the gateway's role: exit %d once stopped, stderr %q", code, errOut.String())
	}
	log := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(log) < 4 {
		t.Fatalf("recover --every as the gateway's role logged no two passes in 10s:\n%s", out.String())
	}
	for _, line := range log[1 : len(log)-1] { // between "sweeping every" and "stopped": failed passes alone
		if !regexp.MustCompile(`^\S+ recover: pass failed: `).MatchString(line) {
			t.Errorf("recover --every as the gateway's role logged a line other than a failed pass: %q", line)
		}
		saysWhy("recover --every's log", line)
	}
}

// doctor and inspect run by a role with no grant on pgadmit's tables (not even the gateway's of
// docs/privileges.sql) say what they left undone, and which roles of docs/privileges.sql run
// them, as recover and prune do: they showed only the server's "permission denied for table".
func TestDoctorAndInspectAsARoleWithoutGrants(t *testing.T) {
	t.Parallel()
	url, owner := newDatabase(t)
	gatewayURL, _ := pgtest.LeastPrivilegeURLs(t, url)
	if err := dbtest.New().OpsRevokeGatewayTableGrants(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	for cmd, undone := range map[string]string{"doctor": "the books were not checked", "inspect": "no table was shown"} {
		out, errOut, code := cli(t, nil, "--database-url", gatewayURL, cmd)
		last := errOut[strings.LastIndex(strings.TrimSuffix(errOut, "\n"), "\n")+1:]
		if code != exitFailure || out != "" || !strings.HasPrefix(last, "pgadmit "+cmd+": ") {
			t.Errorf("%s as a role without grants: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, an error", cmd, code, out, errOut)
		}
		for _, want := range []string{"SQLSTATE 42501", undone, "pgadmit_gateway or pgadmit_maintenance", "docs/privileges.sql"} {
			if !strings.Contains(last, want) {
				t.Errorf("%s's error as a role without grants does not say %q: %s", cmd, want, last)
			}
		}
	}
}

// migrate up and down run by a role of docs/privileges.sql, which may not migrate, with a
// migration pending: the server refuses the lock table, and the error says to run them as the
// role that owns pgadmit's tables, where it gave only goose's "acquire lock ... after retries:
// ... permission denied for table pgadmit_goose_lock" (it had tried once). status and version,
// which those roles may read, work; run by a role that may not read the version table (the
// gateway's, that grant revoked) they say which roles may, where they gave only goose's
// "permission denied for table pgadmit_goose_version".
func TestMigrateAsARoleThatMayNotSaysWhoMay(t *testing.T) {
	t.Parallel()
	url, owner := newDatabase(t)
	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, url)
	cliOK(t, "--database-url", url, "migrate", "down") // the latest migration pending
	for role, roleURL := range map[string]string{"pgadmit_gateway": gatewayURL, "pgadmit_maintenance": maintenanceURL} {
		for _, sub := range []string{"up", "down"} {
			out, errOut, code := cli(t, nil, "--database-url", roleURL, "migrate", sub)
			what := "migrate " + sub + " as a login role of " + role
			if code != exitFailure || out != "" || !strings.HasPrefix(errOut, "pgadmit migrate: ") {
				t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout", what, code, out, errOut)
			}
			oneLine(t, what+"'s error", errOut)
			for _, want := range []string{"SQLSTATE 42501", "the role that owns pgadmit's tables", "docs/privileges.sql"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("%s does not say %q:\n%s", what, want, errOut)
				}
			}
		}
		cliOK(t, "--database-url", roleURL, "migrate", "status")
		cliOK(t, "--database-url", roleURL, "migrate", "version")
	}

	if err := dbtest.New().OpsRevokeGatewayVersionRead(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"status", "version"} {
		out, errOut, code := cli(t, nil, "--database-url", gatewayURL, "migrate", sub)
		what := "migrate " + sub + " as a role that may not read the version table"
		if code != exitFailure || out != "" || !strings.HasPrefix(errOut, "pgadmit migrate: ") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout", what, code, out, errOut)
		}
		oneLine(t, what+"'s error", errOut)
		for _, want := range []string{"SQLSTATE 42501", "the role that owns pgadmit's tables", "pgadmit_gateway or pgadmit_maintenance", "docs/privileges.sql"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s does not say %q:\n%s", what, want, errOut)
			}
		}
	}
}
