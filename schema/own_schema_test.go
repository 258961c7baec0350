package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// A DBA may keep pgadmit in a schema of its own: every role that uses it gets that schema first
// in its search_path (a connection parameter here; ALTER ROLE ... SET search_path does the
// same). The migrations then create everything there, the same objects as in public, and
// nothing in public; admission and maintenance work there, as the least-privilege roles of
// docs/privileges.sql too (the script grants USAGE on the schema it runs in).
func TestMigrateIntoASchemaOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyURL(t)
	public := pgtest.OpenPool(t, dbURL)
	if err := testq.OpsCreateSchemaOfItsOwn(ctx, public); err != nil {
		t.Fatal(err)
	}
	ownURL := dbURL + "&search_path=pgadmit"
	own := pgtest.OpenPool(t, ownURL)
	if err := schema.Migrate(ctx, own); err != nil {
		t.Fatalf("Migrate into the schema pgadmit: %v", err)
	}

	if got := fingerprint(t, public); len(got) != 0 {
		t.Errorf("public holds %d of pgadmit's objects, want none: %+v", len(got), got)
	}
	want := fingerprint(t, pgtest.NewPool(t)) // migrated into public, as usual
	got := fingerprint(t, own)
	for i := range got { // an index's definition names its table's schema
		got[i].Detail = strings.ReplaceAll(got[i].Detail, " ON pgadmit.", " ON public.")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the schema pgadmit differs from a migration into public (-public +pgadmit):\n%s", diff)
	}
	if v, err := schema.Version(ctx, own); err != nil || v != int64(migrationCount(t)) {
		t.Errorf("schema.Version in the schema pgadmit = %d, %v; want %d", v, err, migrationCount(t))
	}

	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, ownURL)
	admitOnceAndCommit(t, gatewayURL, time.Hour)
	sweeper := ratelimit.NewMaintenance(pgtest.OpenPool(t, maintenanceURL))
	if _, err := sweeper.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if _, err := sweeper.Prune(ctx, time.Hour); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	report, err := sweeper.Doctor(ctx)
	if err != nil || !report.OK() {
		t.Fatalf("Doctor = %v, %v", report, err)
	}
}

// Behind PgBouncer a search_path connection parameter reaches the server only where PgBouncer
// tracks it, so the README has the DBA set it on the role (ALTER ROLE ... SET search_path):
// PgBouncer's server sessions then start with it. The database here holds pgadmit in public too,
// so that admissions through PgBouncer that ignored the role's setting would land there.
func TestSchemaOfItsOwnThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pooled, direct := pgtest.NewPoolerURL(t) // pgadmit migrated into public
	public := pgtest.OpenPool(t, direct+"&search_path=public")
	if err := testq.OpsCreateSchemaOfItsOwn(ctx, public); err != nil {
		t.Fatal(err)
	}
	own := pgtest.OpenPool(t, direct+"&search_path=pgadmit")
	if err := schema.Migrate(ctx, own); err != nil {
		t.Fatalf("Migrate into the schema pgadmit: %v", err)
	}
	if err := testq.OpsPutSchemaOfItsOwnFirstForMe(ctx, public); err != nil {
		t.Fatal(err)
	}

	// A minute left in the window of an hour (or a few minutes more): the
	// refused second Reserve must meet the first's counter (in a window of
	// its own it writes another).
	w := pgtest.WindowWithRoom(t, own, time.Hour, time.Minute)
	admitOnceAndCommit(t, pooled, w) // no search_path of its own
	for _, c := range []struct {
		name string
		pool *pgxpool.Pool
		want int64
	}{{"pgadmit", own, 1}, {"public", public, 0}} {
		n, err := testq.TableRowCounts(ctx, c.pool)
		if err != nil {
			t.Fatal(err)
		}
		if n.Reservations != c.want || n.Leases != c.want || n.Counters != c.want {
			t.Errorf("schema %s holds %+v, want %d reservation(s), lease(s) and counter(s)", c.name, n, c.want)
		}
	}
}

// admitOnceAndCommit reserves 60 tokens of 100 (a window of length w) and a slot of 1 on the
// database of url, is refused a second time, and commits 40 tokens: a counter, a reservation
// and a lease written.
func admitOnceAndCommit(t *testing.T, url string, w time.Duration) {
	t.Helper()
	ctx := context.Background()
	gateway := ratelimit.New(pgtest.OpenPool(t, url))
	defer gateway.Close()
	limits := []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "k"}, Metric: ratelimit.MetricTokens, Limit: 100, Amount: 60, Window: w},
		{Scope: ratelimit.Scope{Type: "model", Key: "m"}, Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 1},
	}
	grant, err := gateway.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := gateway.Reserve(ctx, "", "", limits); !errors.Is(err, ratelimit.ErrExceeded) {
		t.Fatalf("second Reserve: %v, want a refusal", err)
	}
	if _, err := gateway.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 40}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// A session with no current schema (no schema of its search_path exists, or its role has USAGE
// on none: a role whose search_path is pgadmit's schema alone, without the grant) reads no
// version table: Version says 0 and Status every migration pending, as where the search_path
// leaves pgadmit's schema out. goose's own check counted the table in any schema then, and the
// read of it failed (42P01), but only where some schema held one.
func TestVersionAndStatusWithoutACurrentSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noSchema := pgtest.OpenPool(t, pgtest.NewURL(t)+"&search_path=nosuch") // pgadmit migrated into public
	if v, err := schema.Version(ctx, noSchema); err != nil || v != 0 {
		t.Errorf("Version without a current schema = %d, %v; want 0, nil", v, err)
	}
	st, err := schema.Status(ctx, noSchema)
	if err != nil {
		t.Fatalf("Status without a current schema: %v", err)
	}
	for _, s := range st {
		if s.State != goose.StatePending {
			t.Errorf("Status without a current schema: migration %d is %s, want pending", s.Source.Version, s.State)
		}
	}
}
