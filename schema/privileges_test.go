package schema_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// The README's quick start migrates at service start-up (schema.Migrate on the service's own
// pool), and docs/dba.md's roles item gives a gateway's login role the group pgadmit_gateway of
// docs/privileges.sql. On a schema the owner has migrated, such a gateway's Migrate has
// nothing to do, and the least-privilege roles can read the schema's version and status.
func TestMigrateAsTheLeastPrivilegeRolesOnACurrentSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t) // migrated by its owner
	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, dbURL)
	for role, url := range map[string]string{"pgadmit_gateway": gatewayURL, "pgadmit_maintenance": maintenanceURL} {
		pool := pgtest.OpenPool(t, url)
		if err := schema.Migrate(ctx, pool); err != nil {
			t.Errorf("Migrate as a login role of %s on a current schema: %v", role, err)
		}
		if _, err := schema.Version(ctx, pool); err != nil {
			t.Errorf("Version as a login role of %s: %v", role, err)
		}
		if _, err := schema.Status(ctx, pool); err != nil {
			t.Errorf("Status as a login role of %s: %v", role, err)
		}
	}
}

// A role that may not migrate (the least-privilege roles: no grant on the lock table, no CREATE)
// finds a migration pending: Migrate fails at once with the server's insufficient_privilege,
// rather than trying the lock row again every second for 5 minutes as if another migrator held it.
func TestMigrateAsARoleThatMayNotFailsFast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := latestPendingURL(t)
	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, dbURL)
	for role, url := range map[string]string{"pgadmit_gateway": gatewayURL, "pgadmit_maintenance": maintenanceURL} {
		mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		start := time.Now()
		err := schema.Migrate(mctx, pgtest.OpenPool(t, url))
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("Migrate as a login role of %s with a migration pending = %v, want insufficient_privilege (42501)", role, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Migrate as a login role of %s with a migration pending took %s, want a failure at once", role, took)
		}
	}
}

// A session that may not write (a hot standby, or default_transaction_read_only on) finds a
// migration pending: Migrate fails at once with the server's read_only_sql_transaction, as Down
// does, rather than trying the lock row again every second for 5 minutes.
func TestMigrateOnAReadOnlySessionFailsFast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := latestPendingURL(t)
	readOnly := pgtest.OpenPool(t, pgtest.ReadOnlyURL(t, dbURL))
	for name, step := range map[string]func(context.Context, *pgxpool.Pool) error{"Migrate": schema.Migrate, "Down": schema.Down} {
		mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		start := time.Now()
		err := step(mctx, readOnly)
		cancel()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
			t.Errorf("%s on a read-only session = %v, want read_only_sql_transaction (25006)", name, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s on a read-only session took %s, want a failure at once", name, took)
		}
	}
}

// docs/privileges.sql's roles may create nothing, in the schema pgadmit was migrated into too,
// where PostgreSQL before 15 let every role create (public): a gateway that could would plant
// there a function that pgadmit's own calls match more closely than PostgreSQL's, run next by the
// maintenance role or the tables' owner with their privileges. The script revokes CREATE on the
// schema from PUBLIC.
func TestLeastPrivilegeRolesMayNotCreateInTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	if err := testq.OpsGrantCreateToPublic(ctx, pgtest.OpenPool(t, pgtest.AdminURL(t, dbURL))); err != nil {
		t.Fatal(err)
	}
	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, dbURL)
	for role, url := range map[string]string{"pgadmit_gateway": gatewayURL, "pgadmit_maintenance": maintenanceURL} {
		may, err := testq.SchemaMayCreate(ctx, pgtest.OpenPool(t, url))
		if err != nil {
			t.Fatal(err)
		}
		if may {
			t.Errorf("a login role of %s may create objects in pgadmit's schema", role)
		}
	}
}

// docs/privileges.sql grants what pgadmit needs and no more, as it and docs/dba.md say: the
// gateway group deletes nothing but a task's queue places, the maintenance group inserts into
// no ledger (nor a counter, lease or task: only its own leases and cursors, and the events of
// the tasks it fails or requeues), neither may truncate, reference or trigger anything nor
// touch goose's lock table (so neither migrates), and the file grants 54 table privileges in
// all, as docs/dba.md counts them.
func TestLeastPrivilegeRolesHoldNoMore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewURL(t)
	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, dbURL)
	held := func(url string) map[string][]string { // privilege -> tables
		rows, err := testq.SchemaTablePrivileges(ctx, pgtest.OpenPool(t, url))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string][]string{}
		for _, r := range rows {
			m[r.Privilege] = append(m[r.Privilege], r.TableName)
		}
		return m
	}
	gateway, maintenance := held(gatewayURL), held(maintenanceURL)
	count := func(m map[string][]string) (n int) {
		for _, tables := range m {
			n += len(tables)
		}
		return n
	}
	if n := count(gateway) + count(maintenance); n != 54 {
		t.Errorf("the two groups hold %d table privileges, want docs/dba.md's 54:\ngateway %v\nmaintenance %v", n, gateway, maintenance)
	}
	for _, c := range []struct {
		role      string
		privilege string
		got, want []string // tables, sorted
	}{
		{"pgadmit_gateway", "DELETE", gateway["DELETE"], []string{"gateway_task_admissions"}},
		{"pgadmit_maintenance", "INSERT", maintenance["INSERT"], []string{"gateway_maintenance_cursors", "gateway_maintenance_leases", "gateway_task_events"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s may %s on %q, want %q only", c.role, c.privilege, c.got, c.want)
		}
	}
	for role, m := range map[string]map[string][]string{"pgadmit_gateway": gateway, "pgadmit_maintenance": maintenance} {
		for _, privilege := range []string{"TRUNCATE", "REFERENCES", "TRIGGER"} {
			if tables := m[privilege]; len(tables) > 0 {
				t.Errorf("%s may %s on %q", role, privilege, tables)
			}
		}
		for privilege, tables := range m {
			if slices.Contains(tables, "pgadmit_goose_lock") {
				t.Errorf("%s may %s on pgadmit_goose_lock: it could take the migration lock", role, privilege)
			}
		}
	}
}

// latestPendingURL is a fresh database (NewURL) whose owner reverted its latest migration: one
// migration pending, for Migrate to apply.
func latestPendingURL(t *testing.T) string {
	t.Helper()
	dbURL := pgtest.NewURL(t)
	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pgtest.OpenPool(t, dbURL)))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Down(context.Background()); err != nil {
		t.Fatalf("Down: %v", err)
	}
	return dbURL
}
