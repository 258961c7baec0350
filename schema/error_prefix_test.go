package schema_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// The package's errors about its input name the package once: "schema:
// invalid pool ...", not "schema: ratelimit: invalid pool ...". errors.As
// still finds the *ratelimit.ValidationError, and errors.Is matches
// ratelimit.ErrInvalidInput.
func TestInputErrorsNameThePackageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	config := pool.Config()
	config.MaxConns = 1
	onePool, err := pgxpool.NewWithConfig(ctx, config) // connects lazily: Migrate refuses it first
	if err != nil {
		t.Fatal(err)
	}
	defer onePool.Close()
	oneDB := stdlib.OpenDBFromPool(pool)
	oneDB.SetMaxOpenConns(1)
	defer oneDB.Close()
	var nilCtx context.Context
	for _, c := range []struct {
		name    string
		call    func() error
		field   string
		message string
	}{
		{"Migrate(nil pool)", func() error { return schema.Migrate(ctx, nil) },
			"pool", "schema: invalid pool (<nil>): must be a pool, not nil"},
		{"Version(nil ctx)", func() error { _, err := schema.Version(nilCtx, pool); return err },
			"ctx", "schema: invalid ctx (<nil>): must be a context, not nil (context.Background() when there is none)"},
		{"Locked(nil step)", func() error { return schema.Locked(ctx, pool, nil) },
			"step", "schema: invalid step (<nil>): must be a function, not nil"},
		{"Migrate(one connection)", func() error { return schema.Migrate(ctx, onePool) },
			"pool", "schema: invalid pool (MaxConns 1): must allow at least 2 connections: migrating holds one while it takes the lock row on another"},
		{"NewProvider(nil db)", func() error { _, err := schema.NewProvider((*sql.DB)(nil)); return err },
			"db", "schema: invalid db (<nil>): must be a *sql.DB, not nil"},
		{"NewProvider(one connection)", func() error { _, err := schema.NewProvider(oneDB); return err },
			"db", "schema: invalid db (MaxOpenConns 1): must allow at least 2 open connections: migrating holds one while it takes the lock row on another"},
		{`NewProvider(WithTableName("t"))`, func() error {
			db := stdlib.OpenDBFromPool(pool)
			p, err := schema.NewProvider(db, goose.WithTableName("t")) // made in a func literal: named all the same
			if err == nil {
				_ = p.Close()
			} else {
				_ = db.Close()
			}
			return err
		}, "opts[0]", "schema: invalid opts[0] (goose.WithTableName): goose refused it next to pgadmit's own version table store and table locker: WithTableName cannot be used with WithStore; set the table name directly on your custom store"},
	} {
		err := c.call()
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != c.field || !errors.Is(err, ratelimit.ErrInvalidInput) {
			t.Errorf("%s: %v, want a *ratelimit.ValidationError on %s", c.name, err, c.field)
			continue
		}
		if got := err.Error(); got != c.message {
			t.Errorf("%s: %q, want %q", c.name, got, c.message)
		}
	}
}
