package schema_test

import (
	"context"
	"errors"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/schema"
)

// On a database that a newer pgadmit migrated (its version table names a migration this package
// does not embed), as during the rollback of a release: Migrate applies nothing and succeeds,
// Status lists this package's migrations, all applied, Version says the newer version, and Down
// refuses, reverting nothing.
func TestMigrateADatabaseAheadOfThisPackage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t) // migrated to the latest version
	n := migrationCount(t)
	latest, err := schema.Version(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.RecordNewerMigration(t, pool, latest+1)

	if err := schema.Migrate(ctx, pool); err != nil {
		t.Errorf("Migrate on a database ahead: %v, want nothing to do", err)
	}
	st, err := schema.Status(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != n || st[n-1].Source.Version != latest {
		t.Errorf("Status on a database ahead lists %d migrations, want this package's %d", len(st), n)
	}
	for _, s := range st {
		if s.State != goose.StateApplied {
			t.Errorf("Status on a database ahead: %s is %s, want applied", s.Source.Path, s.State)
		}
	}
	if v, err := schema.Version(ctx, pool); err != nil || v != latest+1 {
		t.Errorf("Version on a database ahead = %d, %v; want %d", v, err, latest+1)
	}
	err = schema.Down(ctx, pool)
	if !errors.Is(err, goose.ErrVersionNotFound) {
		t.Errorf("Down on a database ahead: %v, want a refusal", err)
	}
	if v, err := schema.Version(ctx, pool); err != nil || v != latest+1 {
		t.Errorf("Version after Down refused = %d, %v; want %d: nothing reverted", v, err, latest+1)
	}
}
