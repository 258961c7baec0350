package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
)

// A migration whose transaction database/sql rolled back as the context ended fails with
// sql.ErrTxDone, which the schema package makes name the context: "(the context had ended:
// context canceled)". migrate's error, which names the migration that failed, keeps that
// detail, and still matches the context's error, so that an interrupt reads "interrupted"
// (runApp), not "transaction has already been committed or rolled back".
func TestMigrateStepErrorKeepsTheEndedContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	perr := &goose.PartialError{
		Failed: &goose.MigrationResult{Source: &goose.Source{Path: "00005_maintenance_indexes.sql"}, Direction: "up"},
		Err:    sql.ErrTxDone,
	}
	err := migrateStepError(ctx, fmt.Errorf("%w (the context had ended: %w)", perr, ctx.Err()))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "(the context had ended: context canceled)") ||
		!strings.HasPrefix(err.Error(), "up 00005_maintenance_indexes.sql failed: ") {
		t.Errorf("migrate's error of a step whose context ended: %q (matches context.Canceled: %v); want the failed migration named and the ended context kept",
			err, errors.Is(err, context.Canceled))
	}
	if !interrupted(ctx, err) {
		t.Errorf("migrate's error %q of an interrupted step is not an interrupt", err)
	}
	// A step that failed on its own, its context live, is said as before.
	err = migrateStepError(context.Background(), perr)
	if want := "up 00005_maintenance_indexes.sql failed: " + sql.ErrTxDone.Error(); err.Error() != want {
		t.Errorf("migrate's error of a failed step: %q, want %q", err, want)
	}
}
