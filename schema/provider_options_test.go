package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
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
	// Each refusal is a *ratelimit.ValidationError naming the option by its
	// place in opts, as a nil db is one on "db", and wraps goose's own reason.
	// Its Value names the option (its message read "invalid opts[0] (<nil>)",
	// as of a nil option, which sets nothing and is never refused).
	for _, tc := range []struct {
		name  string
		opts  []goose.ProviderOption
		field string
		shown string // the message's field and value
		goose string // a part of goose's message
	}{
		{"WithTableName(goose default)", []goose.ProviderOption{goose.WithTableName(goose.DefaultTablename)}, "opts[0]", "invalid opts[0] (goose.WithTableName)", "WithTableName cannot be used with WithStore"},
		{"WithTableName(VersionTable)", []goose.ProviderOption{goose.WithTableName(schema.VersionTable)}, "opts[0]", "invalid opts[0] (goose.WithTableName)", "WithTableName cannot be used with WithStore"},
		{"WithStore", []goose.ProviderOption{goose.WithStore(store)}, "opts[0]", "invalid opts[0] (goose.WithStore)", "store already set"},
		{"WithLocker", []goose.ProviderOption{goose.WithLocker(locker)}, "opts[0]", "invalid opts[0] (goose.WithLocker)", "lock already enabled"},
		{"WithSessionLocker", []goose.ProviderOption{goose.WithSessionLocker(sessionLocker)}, "opts[0]", "invalid opts[0] (goose.WithSessionLocker)", "lock already enabled"},
		{"WithSlog(nil)", []goose.ProviderOption{goose.WithSlog(nil)}, "opts[0]", "invalid opts[0] (goose.WithSlog)", "slog logger must not be nil"},
		{"WithVerbose, WithTableName", []goose.ProviderOption{goose.WithVerbose(false), goose.WithTableName("t")}, "opts[1]", "invalid opts[1] (goose.WithTableName)", "WithTableName cannot be used with WithStore"},
		{"WithVerbose, WithLocker", []goose.ProviderOption{goose.WithVerbose(false), goose.WithLocker(locker)}, "opts[1]", "invalid opts[1] (goose.WithLocker)", "lock already enabled"},
		{"nil, WithLocker", []goose.ProviderOption{nil, goose.WithLocker(locker)}, "opts[1]", "invalid opts[1] (goose.WithLocker)", "lock already enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := stdlib.OpenDBFromPool(pool)
			p, err := schema.NewProvider(db, tc.opts...)
			if err == nil {
				defer p.Close()
				v, verr := p.GetDBVersion(context.Background())
				t.Fatalf("NewProvider with %s succeeded (its provider reads version %d, %v); want an error", tc.name, v, verr)
			}
			_ = db.Close()
			var invalid *ratelimit.ValidationError
			if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != tc.field {
				t.Errorf("NewProvider with %s: %v; want a *ratelimit.ValidationError on %s", tc.name, err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.shown) {
				t.Errorf("NewProvider with %s: %v; want %q in it", tc.name, err, tc.shown)
			}
			if !strings.Contains(err.Error(), tc.goose) {
				t.Errorf("NewProvider with %s: %v; want goose's reason %q in it", tc.name, err, tc.goose)
			}
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
