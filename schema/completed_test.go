package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// Migrate and Down whose context ends right after their last migration was applied (or
// reverted), as goose reads the version reached for its log, return a *schema.CompletedError
// that lists every migration they did and still matches the context's error: goose returned the
// context's error alone, with no word that every migration was done.
func TestMigrateAndDownCancelledAfterTheirLastMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := int64(migrationCount(t))
	for _, c := range []struct {
		name    string
		from    int64 // the version the database starts at
		run     func(context.Context, *pgxpool.Pool) error
		last    int64   // the migration whose end the cancel follows
		want    []int64 // the versions it migrated, in order
		applied int     // migrations applied at the end
	}{
		{"Migrate", n - 2, schema.Migrate, n, []int64{n - 1, n}, int(n)},
		{"Down", 2, schema.Down, 1, []int64{2, 1}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewURL(t)
			setup := pgtest.OpenPool(t, url)
			migratedDownTo(t, setup, c.from)

			mctx, cancel := context.WithCancel(ctx)
			defer cancel()
			cfg, err := pgxpool.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.Tracer = &cancelAfterVersion{version: c.last, cancel: cancel}
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()

			err = c.run(mctx, pool)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s cancelled after its last migration = %v, want context.Canceled", c.name, err)
			}
			var done *schema.CompletedError
			if !errors.As(err, &done) {
				t.Fatalf("%s cancelled after its last migration = %v (%T), want a *schema.CompletedError", c.name, err, err)
			}
			var got []int64
			for _, r := range done.Applied {
				got = append(got, r.Source.Version)
				if r.Error != nil || r.Duration <= 0 || !strings.HasPrefix(r.Source.Path, fmt.Sprintf("%05d_", r.Source.Version)) {
					t.Errorf("%s: result %+v of version %d: want its file, a duration, no error", c.name, r, r.Source.Version)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("%s: CompletedError.Applied has versions %v, want %v", c.name, got, c.want)
			}
			if !strings.Contains(err.Error(), "context canceled") {
				t.Errorf("%s: error %q does not say the context ended", c.name, err)
			}
			assertState(t, setup, c.applied)
		})
	}
}

// cancelAfterVersion is a pgx tracer that calls cancel once the statement recording (or
// deleting) version in the version table is done: at the end of its transaction's commit, or
// of the statement itself outside a transaction.
type cancelAfterVersion struct {
	version  int64
	cancel   context.CancelFunc
	recorded atomic.Bool // the statement ran; its transaction's commit is awaited
}

type versionStatementKey struct{}

func (c *cancelAfterVersion) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, versionStatementKey{}, recordsVersion(data, c.version))
}

// recordsVersion reports whether data is the statement that records (or deletes) version in
// the version table.
func recordsVersion(data pgx.TraceQueryStartData, version int64) bool {
	return strings.Contains(data.SQL, schema.VersionTable) && !strings.Contains(data.SQL, "max(") &&
		len(data.Args) > 0 && fmt.Sprint(data.Args[0]) == fmt.Sprint(version)
}

func (c *cancelAfterVersion) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if data.Err != nil {
		return
	}
	switch {
	case ctx.Value(versionStatementKey{}) == true:
		if conn.PgConn().TxStatus() == 'I' {
			c.cancel()
			return
		}
		c.recorded.Store(true)
	case data.CommandTag.String() == "COMMIT" && c.recorded.Swap(false):
		c.cancel()
	}
}
