package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/schema"
)

// database returns the connection string a dbOptional command (demo, bench) works on: the
// given one, or that of a throwaway local cluster started now, which the returned stop removes.
// stop is never nil.
func (a *app) database(ctx context.Context) (dsn string, stop func(), err error) {
	if a.dsn != "" {
		return a.dsn, func() {}, nil
	}
	fmt.Fprintln(a.stderr, "DATABASE_URL is not set: starting a throwaway PostgreSQL cluster (removed at the end)...")
	c, err := pgcluster.Start(ctx)
	if err != nil {
		if errors.Is(err, pgcluster.ErrNoPostgres) {
			return "", func() {}, err
		}
		return "", func() {}, fmt.Errorf("start a throwaway cluster: %w", err)
	}
	fmt.Fprintf(a.stderr, "throwaway cluster up in %s at %s\n", c.Startup().Round(time.Millisecond), c.URL())
	return c.URL(), func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(a.stderr, "warning: %v\n", err)
			return
		}
		fmt.Fprintln(a.stderr, "throwaway cluster stopped and removed")
	}, nil
}

// migrate applies pending migrations on pool's database and reports the resulting version.
func (a *app) migrate(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	if err := schema.Migrate(ctx, pool); err != nil {
		return 0, err
	}
	v, err := schema.Version(ctx, pool)
	if err != nil {
		return 0, err
	}
	return v, nil
}
