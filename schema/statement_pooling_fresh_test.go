package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// Behind PgBouncer in statement mode, Migrate and Down of a database pgadmit never migrated say
// that the pooler pools by statement, as they do where the version table exists. goose creates
// that table in a transaction, which PgBouncer refuses by closing the connection; goose then
// tried again on the closed connection and returned only "check if version table exists: ...
// driver: bad connection", with no advice and no match for ErrStatementPooling.
func TestMigrateAFreshDatabaseBehindAPgBouncerInStatementMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pooled, direct := pgtest.NewEmptyPoolerURLIn(t, "statement", pgtest.PoolerSize)
	pool := pgtest.OpenPool(t, pooled+"&default_query_exec_mode=exec")
	for _, c := range []struct {
		name string
		run  func(context.Context, *pgxpool.Pool) error
	}{{"Migrate", schema.Migrate}, {"Down", schema.Down}} {
		err := c.run(ctx, pool)
		if !errors.Is(err, ratelimit.ErrStatementPooling) || !strings.Contains(err.Error(), "pool_mode = transaction") {
			t.Errorf("%s of a fresh database behind PgBouncer in statement mode: %v, want ErrStatementPooling and advice", c.name, err)
		}
	}
	version, err := schema.Version(ctx, pgtest.OpenPool(t, direct))
	if err != nil || version != 0 {
		t.Errorf("version after the refusals: %d, %v; want 0", version, err)
	}
}
