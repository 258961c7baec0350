package schema_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/schema"
)

// schemaAt14 is what the round trip of migration 00014 compares: the
// pgadmit_* routines (definitions and comments), the counters' limit_value
// comment, and how many rows each table holds.
type schemaAt14 struct {
	Routines     map[string]dbtest.SchemaRoutinesRow
	LimitComment string
	Rows         dbtest.TableRowCountsRow
}

func readSchemaAt14(t *testing.T, pool *pgxpool.Pool) schemaAt14 {
	t.Helper()
	ctx := context.Background()
	routines, err := testq.SchemaRoutines(ctx, pool)
	if err != nil {
		t.Fatalf("SchemaRoutines: %v", err)
	}
	s := schemaAt14{Routines: map[string]dbtest.SchemaRoutinesRow{}}
	for _, r := range routines {
		s.Routines[r.Signature] = r
	}
	if s.LimitComment, err = testq.ColumnComment(ctx, pool, dbtest.ColumnCommentParams{
		TableName: "gateway_rate_limit_counters", ColumnName: "limit_value",
	}); err != nil {
		t.Fatalf("ColumnComment: %v", err)
	}
	if s.Rows, err = testq.TableRowCounts(ctx, pool); err != nil {
		t.Fatalf("TableRowCounts: %v", err)
	}
	return s
}

// routineNamed returns the routine whose signature starts with name(, failing the test when
// there is none.
func routineNamed(t *testing.T, s schemaAt14, name string) dbtest.SchemaRoutinesRow {
	t.Helper()
	for sig, r := range s.Routines {
		if strings.HasPrefix(sig, name+"(") {
			return r
		}
	}
	t.Fatalf("no routine %s", name)
	return dbtest.SchemaRoutinesRow{}
}

// Migration 00014 on a database with data in every table: Up drops the three hot-batch
// procedures of 00009, redefines the settle of one reservation and lease renewal to test the
// row they update, and rewrites the limit_value comment; Down restores the schema of 00013
// exactly (definitions and comments); Up applies again to the same schema. No row is touched.
func TestMigration14RoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pool))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.UpTo(ctx, 13); err != nil {
		t.Fatalf("UpTo(13): %v", err)
	}
	if err := testq.FixtureFill(ctx, pool, 300); err != nil {
		t.Fatalf("FixtureFill: %v", err)
	}
	before := readSchemaAt14(t, pool)
	if before.Rows.Counters == 0 || before.Rows.Reservations == 0 || before.Rows.Leases == 0 || before.Rows.Tasks == 0 {
		t.Fatalf("fixture left a table empty: %+v", before.Rows)
	}
	for _, name := range []string{"pgadmit_hot_reserve", "pgadmit_hot_reserve_windows", "pgadmit_hot_settle"} {
		routineNamed(t, before, name)
	}

	if _, err := p.UpByOne(ctx); err != nil {
		t.Fatalf("up 00014: %v", err)
	}
	up := readSchemaAt14(t, pool)
	if diff := cmp.Diff(before.Rows, up.Rows); diff != "" {
		t.Errorf("rows after Up (-before +after):\n%s", diff)
	}
	for sig := range up.Routines {
		if strings.HasPrefix(sig, "pgadmit_hot_reserve") || strings.HasPrefix(sig, "pgadmit_hot_settle") {
			t.Errorf("%s is still there after Up", sig)
		}
	}
	routineNamed(t, up, "pgadmit_hot_commit")
	if len(up.Routines) != len(before.Routines)-3 {
		t.Errorf("Up left %d routines, want %d (three dropped)", len(up.Routines), len(before.Routines)-3)
	}
	if up.LimitComment == before.LimitComment || !strings.Contains(up.LimitComment, "smallest limit") ||
		!strings.Contains(up.LimitComment, "trimmed") {
		t.Errorf("limit_value comment after Up = %q, want what is written (smallest limit of a batch, a trimmed block's)", up.LimitComment)
	}
	// The tests of the row updated, as IS TRUE (no partial index may match them).
	for name, test := range map[string]string{
		"pgadmit_settle_one":   "AND (r.status = 'reserved'",
		"pgadmit_renew_leases": "AND (l.released_at IS NULL AND l.expires_at > v_now) IS TRUE",
	} {
		r, old := routineNamed(t, up, name), routineNamed(t, before, name)
		if !strings.Contains(r.Definition, test) || strings.Contains(old.Definition, test) {
			t.Errorf("%s after Up does not test the row it updates (%q)", name, test)
		}
		if r.Comment != old.Comment {
			t.Errorf("%s comment changed: %q, was %q", name, r.Comment, old.Comment)
		}
	}
	missing, err := testq.SchemaObjectsWithoutComment(ctx, pool)
	if err != nil || len(missing) != 0 {
		t.Errorf("objects without a comment after Up: %+v, %v", missing, err)
	}

	if _, err := p.Down(ctx); err != nil {
		t.Fatalf("down 00014: %v", err)
	}
	assertState(t, pool, 13)
	if diff := cmp.Diff(before, readSchemaAt14(t, pool)); diff != "" {
		t.Errorf("Down did not restore 00013 (-before +after Down):\n%s", diff)
	}

	if _, err := p.UpByOne(ctx); err != nil {
		t.Fatalf("up 00014 again: %v", err)
	}
	if diff := cmp.Diff(up, readSchemaAt14(t, pool)); diff != "" {
		t.Errorf("second Up differs from the first (-first +second):\n%s", diff)
	}
}
