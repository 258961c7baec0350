package schema_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// Migrating needs two connections at once: goose holds one for the migrations while its table
// locker takes, renews and gives up the lock row on another. On a pool of one (pool_max_conns=1)
// Migrate and Down waited for a second connection that never came, forever without a deadline:
// they are refused at once, as bad input, and so is NewProvider of a *sql.DB limited to one
// connection. The refusal names the bound it found: it said "invalid pool (<nil>)", as of a nil
// pool, of a pool that was there.
func TestMigrateRefusesAPoolOfOneConnection(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(pgtest.NewEmptyURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for name, call := range map[string]func() error{
		"Migrate": func() error { return schema.Migrate(ctx, pool) },
		"Down":    func() error { return schema.Down(ctx, pool) },
	} {
		var invalid *ratelimit.ValidationError
		start := time.Now()
		err := call()
		if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "pool" {
			t.Errorf("%s on a pool of one connection: %v after %s, want a *ratelimit.ValidationError on pool at once", name, err, time.Since(start).Round(time.Millisecond))
		} else if !strings.Contains(err.Error(), "invalid pool (MaxConns 1)") {
			t.Errorf("%s on a pool of one connection: %q, want it to name the pool's MaxConns, 1", name, err)
		}
	}
	// Nothing was created: the refusal came first.
	if v, err := schema.Version(ctx, pool); err != nil || v != 0 {
		t.Errorf("Version after the refusals = %d, %v; want 0", v, err)
	}

	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	db.SetMaxOpenConns(1)
	var invalid *ratelimit.ValidationError
	if p, err := schema.NewProvider(db); !errors.As(err, &invalid) || invalid.Field != "db" {
		if p != nil {
			_ = p.Close()
		}
		t.Errorf("NewProvider of a *sql.DB of one connection: %v, want a *ratelimit.ValidationError on db", err)
	} else if !strings.Contains(err.Error(), "invalid db (MaxOpenConns 1)") {
		t.Errorf("NewProvider of a *sql.DB of one connection: %q, want it to name its MaxOpenConns, 1", err)
	}
}
