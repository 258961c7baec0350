package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// pgadmit's functions run with their caller's privileges, and a function resolves what it calls
// through the search_path it runs under. Given its caller's, a function of another schema on it
// that matches a call more closely than PostgreSQL's own (an integer where pg_catalog's takes a
// bigint) ran in its place: a role that may create in public (every role, before PostgreSQL 15)
// ran code of its choosing as every gateway whose search_path keeps public after pgadmit's
// schema, or as the owner. Each function sets its own search_path, its schema then pg_temp: the
// lookalikes are not seen, and Reserve, RenewLeases and Commit run as they should.
func TestFunctionsIgnoreLookalikesOutsideTheirSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyURL(t)
	public := pgtest.OpenPool(t, dbURL)
	if err := testq.OpsCreateSchemaOfItsOwn(ctx, public); err != nil {
		t.Fatal(err)
	}
	if err := schema.Migrate(ctx, pgtest.OpenPool(t, dbURL+"&search_path=pgadmit")); err != nil {
		t.Fatalf("Migrate into the schema pgadmit: %v", err)
	}
	if err := testq.OpsPlantLookalikeFunctions(ctx, public); err != nil {
		t.Fatal(err)
	}

	gateway := ratelimit.New(pgtest.OpenPool(t, dbURL+"&search_path=pgadmit,public"))
	defer gateway.Close()
	limits := []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "k"}, Metric: ratelimit.MetricTokens, Limit: 100, Amount: 60, Window: time.Hour},
		{Scope: ratelimit.Scope{Type: "model", Key: "m"}, Metric: ratelimit.MetricConcurrent, Limit: 1, Amount: 1},
	}
	grant, err := gateway.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve with lookalike functions in public: %v", err)
	}
	if _, err := gateway.RenewLeases(ctx, grant.Leases); err != nil {
		t.Errorf("RenewLeases with lookalike functions in public: %v", err)
	}
	if _, err := gateway.Commit(ctx, grant, map[string]float64{ratelimit.MetricTokens: 40}); err != nil {
		t.Errorf("Commit with lookalike functions in public: %v", err)
	}
}

// Every function and procedure the migrations leave sets its search_path to the schema it was
// migrated into, then pg_temp (last, so that no temporary table of the caller stands in for one
// of pgadmit's): a later migration's CREATE OR REPLACE that forgot the SET clause would lose it.
// All but pgadmit_hot_commit, which commits (a procedure with a SET clause may not) and names
// what it calls in pg_catalog.
func TestFunctionsSetTheirSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := pgtest.NewEmptyURL(t)
	if err := testq.OpsCreateSchemaOfItsOwn(ctx, pgtest.OpenPool(t, dbURL)); err != nil {
		t.Fatal(err)
	}
	own := pgtest.OpenPool(t, dbURL+"&search_path=pgadmit")
	if err := schema.Migrate(ctx, own); err != nil {
		t.Fatalf("Migrate into the schema pgadmit: %v", err)
	}
	for pool, want := range map[string]string{"public": "public, pg_temp", "pgadmit": "pgadmit, pg_temp"} {
		p := pgtest.NewPool(t)
		if pool == "pgadmit" {
			p = own
		}
		fns, err := testq.SchemaFunctionsSearchPath(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(fns) == 0 {
			t.Fatalf("no function in the schema %s", pool)
		}
		for _, f := range fns {
			want := want
			if f.Name == "pgadmit_hot_commit()" {
				want = ""
			}
			if f.SearchPath != want {
				t.Errorf("%s.%s sets search_path %q, want %q", pool, f.Name, f.SearchPath, want)
			}
		}
	}
}
