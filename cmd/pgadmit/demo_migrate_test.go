package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// bench and demo migrate the database they run on themselves. Where pgadmit was migrated into a
// schema of its own that the connection's search_path leaves out, they refuse as migrate up does
// there, with its advice, and create nothing: they installed a second, empty pgadmit in the
// current schema (public) and ran on it, while the gateways use the first.
func TestDemoAndBenchOnADatabaseMigratedIntoAnotherSchema(t *testing.T) {
	t.Parallel()
	url, ownURL := migratedIntoSchemaOfItsOwn(t)
	hint := `the database's pgadmit schema is at version 0 on this connection's search_path ("$user", public), ` +
		`but pgadmit's version table pgadmit_goose_version is in schema pgadmit: put that schema first in the search_path ` +
		`(search_path=pgadmit in the database URL, or set on the role: README, "A schema of its own"), ` +
		`or run 'pgadmit migrate up --new-copy' to install a second pgadmit in schema public all the same`
	for _, args := range [][]string{{"demo", "--duration", "5s"}, {"demo", "--http", "--duration", "5s"}, {"bench", "--duration", "1s"}} {
		out, errOut, code := cli(t, nil, append([]string{"--database-url", url}, args...)...)
		want := "pgadmit " + args[0] + ": nothing applied: " + hint + "\n"
		if code != exitFailure || out != "" || errOut != want {
			t.Errorf("pgadmit %s with pgadmit in another schema: exit %d, stdout %q, stderr %q; want exit 1, stderr %q",
				strings.Join(args, " "), code, out, errOut, want)
		}
	}
	// Nothing was created in public: from the schema pgadmit, no other schema holds a version table.
	where, err := db.New().VersionTableElsewhere(context.Background(), pgtest.OpenPool(t, ownURL), schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	if where.CurrentSchema != "pgadmit" || len(where.OtherSchemas) != 0 {
		t.Errorf("after the refused demo and bench, from the schema pgadmit: %+v; want current schema pgadmit and no other", where)
	}
	// Installed as the advice says, the second pgadmit is the one bench runs on.
	latest := strings.TrimSpace(cliOK(t, "--database-url", ownURL, "migrate", "version"))
	cliOK(t, "--database-url", url, "migrate", "up", "--new-copy")
	if out := cliOK(t, "--database-url", url, "bench", "--only", "W1", "--workers", "1", "--duration", "100ms", "--statements", "0"); !strings.Contains(out, ", schema version "+latest+"\n") {
		t.Errorf("bench after migrate up --new-copy does not run on schema version %s:\n%s", latest, out)
	}
}

// On a database pgadmit never migrated, bench migrates it and says the version it reached (read
// again after migrating: not the 0 it read before).
func TestBenchMigratesAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	url := pgtest.NewEmptyURL(t)
	versions, err := migrationVersions()
	if err != nil {
		t.Fatal(err)
	}
	latest := strconv.FormatInt(versions[len(versions)-1], 10)
	out, errOut, code := cli(t, nil, "--database-url", url, "bench", "--only", "W1", "--workers", "1", "--duration", "100ms", "--statements", "0")
	if code != exitOK || errOut != "" || !strings.Contains(out, ", schema version "+latest+"\n") {
		t.Errorf("bench on an empty database: exit %d, stderr %q; want exit 0, nothing on stderr, and schema version %s in its header:\n%s", code, errOut, latest, out)
	}
}
