package main

import (
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// What the commands say on a connection whose search_path is nosuch, a schema that does not
// exist, so that it has no current schema: noSchemaOnNosuch, the role's name, then
// noSchemaAdvice (migrate up's refusal there, noCurrentSchema).
const (
	noSchemaOnNosuch = `this connection has no schema to install pgadmit into (no schema of its search_path, nosuch, exists that role `
	noSchemaAdvice   = ` may use): create one, or put one first in the search_path (search_path=<schema> in the database URL, or set on the role: README, "A schema of its own")`
)

// bench and demo migrate the database they run on themselves. On a connection with no current
// schema they fail as migrate up does there, with its advice: they failed with the server's
// "no schema has been selected to create in" (SQLSTATE 3F000), or, where pgadmit's version
// table is in a schema the search_path leaves out, with 'relation "pgadmit_goose_version" does
// not exist' (42P01); as a role without USAGE on that schema, with the grant it lacks.
func TestDemoAndBenchWithNoSchemaToInstallInto(t *testing.T) {
	t.Parallel()
	nowhere := pgtest.NewEmptyURL(t) + "&search_path=nosuch"
	own, _ := migratedIntoSchemaOfItsOwn(t)
	elsewhere := own + "&search_path=nosuch"
	hint := `the database's pgadmit schema is at version 0 on this connection's search_path (nosuch), ` +
		`but pgadmit's version table pgadmit_goose_version is in schema pgadmit: put that schema first in the search_path ` +
		`(search_path=pgadmit in the database URL, or set on the role: README, "A schema of its own")`
	// A role with pgadmit's schema alone in its search_path but no USAGE on it: PostgreSQL leaves
	// the schema out, so the session has no current schema, and the fix is the grant.
	noUsage, role := pgtest.NoGrantsURL(t, own+"&search_path=pgadmit")
	noUsageHint := `the database's pgadmit schema is at version 0 on this connection's search_path (pgadmit), ` +
		`but pgadmit's version table pgadmit_goose_version is in schema pgadmit, on which role ` + role + ` has no USAGE, so PostgreSQL leaves it out of the search_path: ` +
		`GRANT USAGE ON SCHEMA pgadmit TO ` + role + ` (docs/privileges.sql grants it to its roles) and have that schema first in the search_path ` +
		`(search_path=pgadmit in the database URL, or set on the role: README, "A schema of its own")`
	for _, args := range [][]string{{"demo", "--duration", "5s"}, {"demo", "--http", "--duration", "5s"}, {"bench", "--duration", "1s"}} {
		what := "pgadmit " + strings.Join(args, " ")
		out, errOut, code := cli(t, nil, append([]string{"--database-url", nowhere}, args...)...)
		want := "pgadmit " + args[0] + ": nothing applied: " + noSchemaOnNosuch
		if code != exitFailure || out != "" || !strings.HasPrefix(errOut, want) || !strings.HasSuffix(errOut, noSchemaAdvice+"\n") {
			t.Errorf("%s with no current schema: exit %d, stdout %q, stderr %q; want exit 1 and %q...", what, code, out, errOut, want)
		}
		oneLine(t, what+"'s stderr", errOut)
		out, errOut, code = cli(t, nil, append([]string{"--database-url", elsewhere}, args...)...)
		want = "pgadmit " + args[0] + ": nothing applied: " + hint + "\n"
		if code != exitFailure || out != "" || errOut != want {
			t.Errorf("%s with no current schema and pgadmit in another schema: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", what, code, out, errOut, want)
		}
		out, errOut, code = cli(t, nil, append([]string{"--database-url", noUsage}, args...)...)
		want = "pgadmit " + args[0] + ": nothing applied: " + noUsageHint + "\n"
		if code != exitFailure || out != "" || errOut != want {
			t.Errorf("%s as a role without USAGE on pgadmit's schema, search_path pgadmit: exit %d, stdout %q, stderr %q; want exit 1, stderr %q", what, code, out, errOut, want)
		}
	}
}

// migrate status, version and down on a connection with no current schema, and pgadmit in no
// schema either, answer for the connection as before (every migration pending, 0, nothing to
// revert; exit 0), and warn on stderr that it has no schema to install pgadmit into, with
// migrate up's advice: they said nothing of it, and up then refused.
func TestMigrateStatusVersionDownWithNoSchemaToInstallInto(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t) + "&search_path=nosuch"
	warning := "pgadmit migrate: warning: " + noSchemaOnNosuch
	warns := func(what, errOut string) {
		t.Helper()
		if !strings.HasPrefix(errOut, warning) || !strings.HasSuffix(errOut, noSchemaAdvice+"\n") {
			t.Errorf("%s with no current schema: stderr %q; want %q...", what, errOut, warning)
		}
		oneLine(t, what+"'s stderr", errOut)
	}
	out, errOut, code := cli(t, nil, "--database-url", url, "migrate", "version")
	if code != exitOK || out != "0\n" {
		t.Errorf("migrate version with no current schema: exit %d, stdout %q; want exit 0, 0", code, out)
	}
	warns("migrate version", errOut)
	out, errOut, code = cli(t, nil, "--database-url", url, "migrate", "status")
	if code != exitOK || !strings.Contains(out, "pending") || strings.Contains(out, "applied") {
		t.Errorf("migrate status with no current schema: exit %d; want exit 0, every migration pending; stdout:\n%s", code, out)
	}
	warns("migrate status", errOut)
	for _, to := range [][]string{nil, {"--to", "0"}} {
		args := append([]string{"migrate", "down"}, to...)
		out, errOut, code := cli(t, nil, append([]string{"--database-url", url}, args...)...)
		if want := "nothing to do: no pgadmit migration is applied\nschema version 0\n"; code != exitOK || out != want {
			t.Errorf("%s with no current schema: exit %d, stdout %q; want exit 0, stdout %q", strings.Join(args, " "), code, out, want)
		}
		warns(strings.Join(args, " "), errOut)
	}
}
