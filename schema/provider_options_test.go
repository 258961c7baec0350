package schema_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// TestNewProviderRefusesConflictingOptions checks NewProvider's documented
// promise: options that set the table name, store or locker conflict with
// pgadmit's own and make it fail. A provider that accepted
// goose.WithTableName would record pgadmit's migrations in the service's own
// goose table, the very collision VersionTable exists to prevent.
func TestNewProviderRefusesConflictingOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	store, err := database.NewStore(goose.DialectPostgres, "some_store_table")
	if err != nil {
		t.Fatal(err)
	}
	locker, err := lock.NewPostgresTableLocker()
	if err != nil {
		t.Fatal(err)
	}
	sessionLocker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opt  goose.ProviderOption
	}{
		{"WithTableName(goose default)", goose.WithTableName(goose.DefaultTablename)},
		{"WithTableName(VersionTable)", goose.WithTableName(schema.VersionTable)},
		{"WithStore", goose.WithStore(store)},
		{"WithLocker", goose.WithLocker(locker)},
		{"WithSessionLocker", goose.WithSessionLocker(sessionLocker)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := stdlib.OpenDBFromPool(pool)
			p, err := schema.NewProvider(db, tc.opt)
			if err == nil {
				defer p.Close()
				v, verr := p.GetDBVersion(context.Background())
				t.Fatalf("NewProvider with %s succeeded (its provider reads version %d, %v); want an error", tc.name, v, verr)
			}
			_ = db.Close()
		})
	}

	// Options that touch none of them still work.
	db := stdlib.OpenDBFromPool(pool)
	p, err := schema.NewProvider(db, goose.WithVerbose(false))
	if err != nil {
		t.Fatalf("NewProvider with WithVerbose: %v", err)
	}
	defer p.Close()
	v, err := p.GetDBVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want, err := schema.Version(context.Background(), pool); err != nil || v != want || v == 0 {
		t.Fatalf("provider reads version %d, schema.Version %d (%v); want equal and > 0", v, want, err)
	}
}
