package main

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// migrate down on a database at version 0, or on one pgadmit never migrated, reverts nothing,
// says so and the version it is at, and exits 0; on a database without the version table it
// creates nothing (goose's provider would create the version and lock tables). It used to
// print "nothing to do" alone, without the version.
func TestMigrateDownAtVersionZeroSaysSo(t *testing.T) {
	t.Parallel()
	migratedToZero := pgtest.NewURL(t)
	cliOK(t, "--database-url", migratedToZero, "migrate", "down", "--to", "0")
	empty := pgtest.NewEmptyURL(t)

	for _, url := range []string{migratedToZero, empty} {
		for _, args := range [][]string{{"migrate", "down"}, {"migrate", "down", "--to", "0"}} {
			out, errOut, code := cli(t, nil, append([]string{"--database-url", url}, args...)...)
			if code != exitOK || errOut != "" {
				t.Errorf("pgadmit %s at version 0: exit %d, stderr %q; want exit 0 and nothing on stderr", strings.Join(args, " "), code, errOut)
			}
			if want := "nothing to do: no pgadmit migration is applied\nschema version 0\n"; out != want {
				t.Errorf("pgadmit %s at version 0: stdout %q, want %q", strings.Join(args, " "), out, want)
			}
		}
	}
	out := cliOK(t, "--database-url", empty, "migrate", "down", "--to", "2")
	if want := "nothing to do: no pgadmit migration is applied\nschema version 0\nalready below version 2 (to apply up to it: pgadmit migrate up --to 2)\n"; out != want {
		t.Errorf("migrate down --to 2 on an empty database: stdout %q, want %q", out, want)
	}
	if exists := versionTableExists(t, empty); exists {
		t.Errorf("migrate down on a database pgadmit never migrated created %s", schema.VersionTable)
	}
}

// versionTableExists reports whether the database of url has pgadmit's goose version table.
func versionTableExists(t *testing.T, url string) bool {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func(c *sql.Conn) { _ = c.Close() }(conn)
	store, err := database.NewStore(goose.DialectPostgres, schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	exists, err := store.(database.StoreExtender).TableExists(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	return exists
}
