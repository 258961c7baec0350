package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/internal/poolerr"
	"github.com/pgadmit/pgadmit/schema"
)

func migrateCommand() *command {
	return &command{
		name:    "migrate",
		args:    "[flags] up|down|status|version",
		summary: "apply, revert or show pgadmit's schema migrations",
		help: `
Applies pgadmit's embedded migrations (schema/*.sql) with goose's Provider API, recording them in
the version table ` + schema.VersionTable + ` (never goose's default table, so a service's own
goose history is left alone). Concurrent migrators wait for each other on a lock row in the table
` + schema.LockTable + ` (no session state: it works through PgBouncer in transaction pooling
mode), for up to 5 minutes (Ctrl-C stops the wait). While up or down runs, every 5s it says on
stderr what it waits for: that lock (or, when the connection was lost or the database froze
meanwhile, that), or a migration that has run that long.

  up       apply every pending migration (or up to --to). Where this connection sees version 0
           but pgadmit's version table is in another schema (pgadmit migrated into a schema of
           its own, which the search_path leaves out), it applies nothing, names that schema and
           fails: put it first in the search_path, or give --new-copy to install a second
           pgadmit here all the same.
  down     revert the latest applied migration (or down to --to; --to 0 drops every pgadmit
           table and its data, all but the version and lock tables). At version 0, or on a
           database pgadmit never migrated, it reverts and creates nothing, prints "nothing to
           do" and "schema version 0", and exits 0, as goose's down-to does (goose's one-step
           down fails there): a schema already at the bottom is done, not an error. Where
           pgadmit's version table is then in another schema, it reverts nothing, names that
           schema and fails.
  status   list every migration, applied (with when) or pending
  version  print the current schema version (0: nothing applied)

status and version only read the version table: they take no lock, create nothing, and answer
while another process migrates. Where this connection sees version 0 but pgadmit's version table
is in another schema, status and version answer for the connection and warn where it is; down
reverts nothing, names that schema and fails. Where this connection has no current schema (no
schema of its search_path exists that its role may use), up applies nothing and fails, saying
what to do, and down, status and version answer for the connection and warn of it.`,
		db:  dbRequired,
		run: runMigrate,
	}
}

func runMigrate(ctx context.Context, a *app, args []string) (err error) {
	fs := a.flags(a.cmd)
	to := fs.Int64("to", -1, "target `version` for up and down (default: up to the latest, down by one)")
	newCopy := fs.Bool("new-copy", false, "up: apply even though pgadmit's version table is in another schema than this connection's (installing a second pgadmit)")
	args, err = a.parse(a.cmd, fs, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return usagef("missing subcommand: up, down, status or version")
	}
	sub := args[0]
	if len(args) > 1 {
		return usagef("unexpected argument %q after %s", args[1], sub)
	}
	// -1 stands for "not given", which --to -1 must not pass for.
	toGiven := flagGiven(fs, "to")
	switch sub {
	case "up", "down":
	case "status", "version":
		if toGiven {
			return usagef("--to applies to up and down, not %s", sub)
		}
	default:
		return usagef("unknown subcommand %q: want up, down, status or version", sub)
	}
	if *newCopy && sub != "up" {
		return usagef("--new-copy applies to up, not %s", sub)
	}
	if toGiven && *to < 0 {
		return usagef("--to must be a version >= 0, got %d", *to)
	}
	if sub == "up" && *to == 0 {
		return usagef("--to for up must be a version >= 1 (down --to 0 reverts everything)")
	}
	if *to > 0 {
		// goose answers a version it does not know with "nothing to do" (or applies
		// everything, for up from below it): a typo must not pass for success.
		versions, err := migrationVersions()
		if err != nil {
			return err
		}
		if !slices.Contains(versions, *to) {
			return usagef("--to %d: no such migration (versions %d to %d; down --to 0 reverts them all)", *to, versions[0], versions[len(versions)-1])
		}
	}

	pool, err := a.connect(ctx, a.dsn, 2)
	if err != nil {
		return err
	}
	defer grace.CloseOnExit(ctx, pool)
	defer func() { err = privilegeDenied(err, "migrate "+sub, false) }() // it says who may migrate

	// A database that a newer pgadmit migrated: goose cannot revert a migration it does not
	// embed ("version not found"), and lists only the ones it knows. (up says so after its
	// step, in migrateUpDown.) have is also what version prints: the table is read once.
	var have int64
	ahead := ""
	if sub != "up" {
		if have, ahead, err = schemaAhead(ctx, pool); err != nil {
			return err
		}
		if ahead != "" && sub == "down" {
			return fmt.Errorf("%s: revert it with the pgadmit that applied it", ahead)
		}
		// At version 0 on this connection, where pgadmit is elsewhere: status and version answer
		// for the connection, as before (every migration pending, 0), and warn where pgadmit is
		// and how to reach it. down fails, as up does (refuseSecondCopy): it could revert nothing
		// of the pgadmit meant, and a script's 'down --to 0' must not read success. Where pgadmit
		// is in no schema and the connection has none to install it into, all three answer as
		// before (down: nothing to revert, truly) and warn with up's advice, as up would refuse.
		if have == 0 {
			if r := readCatalogs(ctx, pool); r != nil {
				if w := elsewhereOf(*r); w != nil {
					if sub == "down" {
						return fmt.Errorf("nothing reverted: %s", w)
					}
					a.warn("%s", w)
				} else if r.CurrentSchema == "" {
					a.warn("%s", noCurrentSchema(*r))
				}
			}
		}
		if have == 0 && sub == "down" {
			return a.nothingToRevert(passedTo(sub, *to))
		}
	}

	switch sub {
	case "up":
		// One read of the version table (no lock) serves the checks below, and one of the
		// catalogs where it shows nothing applied (unread: nil).
		st, err := schema.Status(ctx, pool)
		if err != nil {
			return err
		}
		catalogs := readCatalogsWhereNoneApplied(ctx, pool, st)
		// pgadmit migrated into a schema this search_path leaves out: up would install a second
		// one here, which the tools would read while the gateways use the first.
		if !*newCopy {
			if err := refuseSecondCopy(catalogs); err != nil {
				return err
			}
		}
		// Nothing to apply: say so without waiting for the lock another migrator may hold.
		if !pendingUpTo(st, *to) {
			return a.migrateUpDown(ctx, pool, "applying", passedTo(sub, *to), nil)
		}
		if err := noSchemaToInstallInto(catalogs); err != nil {
			return err
		}
		return a.migrateUpDown(ctx, pool, "applying", passedTo(sub, *to), func(p *goose.Provider) ([]*goose.MigrationResult, error) {
			if *to >= 0 {
				return p.UpTo(ctx, *to)
			}
			return p.Up(ctx)
		})
	case "down":
		return a.migrateUpDown(ctx, pool, "reverting", passedTo(sub, *to), func(p *goose.Provider) ([]*goose.MigrationResult, error) {
			if *to >= 0 {
				return p.DownTo(ctx, *to)
			}
			r, err := p.Down(ctx)
			if r == nil {
				return nil, err
			}
			return []*goose.MigrationResult{r}, err
		})
	case "status":
		st, err := schema.Status(ctx, pool)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tMIGRATION")
		for _, s := range st {
			at := "-"
			if !s.AppliedAt.IsZero() {
				at = s.AppliedAt.UTC().Format(time.DateTime + " MST")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Source.Version, s.State, at, s.Source.Path)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if ahead != "" {
			fmt.Fprintln(a.stdout, ahead)
		}
		return nil
	default: // version
		fmt.Fprintln(a.stdout, have)
		return nil
	}
}

// readCatalogsWhereNoneApplied reads where pgadmit's version table is (VersionTableElsewhere)
// when st, the status of every migration on pool's search_path, shows none applied: the only
// case where it can be elsewhere, or the session have no current schema. nil otherwise, or when
// the catalogs could not be read (the statements after it then say what went wrong, as before
// these checks).
func readCatalogsWhereNoneApplied(ctx context.Context, pool *pgxpool.Pool, st []*goose.MigrationStatus) *db.VersionTableElsewhereRow {
	if slices.ContainsFunc(st, func(s *goose.MigrationStatus) bool { return s.State == goose.StateApplied }) {
		return nil
	}
	return readCatalogs(ctx, pool)
}

// readCatalogs reads where pgadmit's version table is (VersionTableElsewhere), for a database
// at version 0 on pool's search_path; nil when the catalogs could not be read.
func readCatalogs(ctx context.Context, pool *pgxpool.Pool) *db.VersionTableElsewhereRow {
	r, err := db.New().VersionTableElsewhere(ctx, pool, schema.VersionTable)
	if err != nil {
		return nil
	}
	return &r
}

// refuseSecondCopy is up's refusal on a database whose version table, at version 0 on the
// search_path, is in another schema (catalogs, read where none is applied, says so); nil
// otherwise.
func refuseSecondCopy(catalogs *db.VersionTableElsewhereRow) error {
	if catalogs == nil {
		return nil
	}
	w := elsewhereOf(*catalogs)
	switch {
	case w == nil:
		return nil
	case w.current == "": // --new-copy would have no schema to install into either
		return fmt.Errorf("nothing applied: %s", w)
	}
	return fmt.Errorf("nothing applied: %s, or run 'pgadmit migrate up --new-copy' to install %s all the same", w, w.secondCopy())
}

// noSchemaToInstallInto is up's refusal, before it takes the lock, where the session has no
// current schema (no schema of its search_path exists that its role may use; catalogs, read
// where none is applied, says so): goose failed there creating its tables (3F000), or, where
// pgadmit's version table is in a schema the role may not use (up --new-copy), with 42P01 on
// its lock table. nil otherwise.
func noSchemaToInstallInto(catalogs *db.VersionTableElsewhereRow) error {
	if catalogs == nil || catalogs.CurrentSchema != "" {
		return nil
	}
	role := sqlIdentifier(catalogs.RoleName)
	if w := elsewhereOf(*catalogs); w != nil {
		return fmt.Errorf("nothing applied: %s; --new-copy has no schema to install a second pgadmit into (no schema of the search_path exists that role %s may use)", w, role)
	}
	return fmt.Errorf("nothing applied: %s", noCurrentSchema(*catalogs))
}

// nothingToRevert is down on a database at version 0, or that pgadmit never migrated: it says
// so and the version, and exits 0, without opening goose's provider, which would create the
// version and lock tables there.
func (a *app) nothingToRevert(passed func(version int64) string) error {
	fmt.Fprintln(a.stdout, "nothing to do: no pgadmit migration is applied")
	fmt.Fprintln(a.stdout, "schema version 0")
	if msg := passed(0); msg != "" {
		fmt.Fprintln(a.stdout, msg)
	}
	return nil
}

// pendingUpTo reports whether st, the status of every migration, has one up to version to (-1:
// the latest) pending.
func pendingUpTo(st []*goose.MigrationStatus, to int64) bool {
	return slices.ContainsFunc(st, func(s *goose.MigrationStatus) bool {
		return s.State == goose.StatePending && (to < 0 || s.Source.Version <= to)
	})
}

// migrateUpDown runs an up or down step with pgadmit's provider, once it holds the migration
// lock row (schema.Locked), and prints each migration it applied or reverted (also when a later
// one failed or was interrupted), then the resulting version, and what passed says of it. While the step runs, it says on stderr what a long one
// waits for (doing: "applying" or "reverting"). A nil step is one with nothing to do.
func (a *app) migrateUpDown(ctx context.Context, pool *pgxpool.Pool, doing string, passed func(version int64) string,
	step func(*goose.Provider) ([]*goose.MigrationResult, error)) error {
	var results []*goose.MigrationResult
	var err error
	var watch *migrateWatch
	if step != nil {
		watch = &migrateWatch{migrated: a.migrated}
		reach := func(ctx context.Context) error {
			if err := pool.Ping(ctx); err != nil {
				return errors.New(scrub(err.Error(), a.dsn))
			}
			return nil
		}
		stop := watch.report(a.stderr, doing, time.Now(), a.migrateProgressEvery, reach)
		err = schema.Locked(ctx, pool, func(p *goose.Provider) error {
			watch.holdLock()
			var err error
			results, err = step(p)
			return err
		}, goose.WithVerbose(true), goose.WithSlog(slog.New(watch)))
		stop()
	}
	// A step that failed, or was interrupted, after some migrations: goose returns those in its
	// partial migration error, not in its results, or, interrupted once the last was done (as it
	// read the version reached, for its log), none at all. They are done, and said as a step's
	// are, from goose's log of them.
	if err != nil && watch != nil {
		results = watch.completed()
	}
	for _, r := range results {
		if r.Error != nil {
			continue
		}
		fmt.Fprintf(a.stdout, "%-4s %s (%s)\n", r.Direction, r.Source.Path, r.Duration.Round(time.Millisecond))
	}
	// Nothing left to step over (another migrator got there first): say so, and the version.
	if errors.Is(err, goose.ErrNoNextVersion) || errors.Is(err, goose.ErrNoCurrentVersion) {
		results, err = nil, nil
	}
	if err != nil {
		// A pooler in statement mode refuses the migration's transaction: say what to change.
		return poolerr.Wrap(migrateStepError(ctx, err), poolerr.MigrationsNeed)
	}
	if len(results) == 0 {
		fmt.Fprintln(a.stdout, "nothing to do")
	}
	// Read without the lock, as status and version do (goose's GetDBVersion waits for it: for up
	// to 5 minutes when another migrator holds it, even after a step that had nothing to do).
	v, err := schema.Version(ctx, pool)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	fmt.Fprintf(a.stdout, "schema version %d\n", v)
	if msg := passed(v); msg != "" {
		fmt.Fprintln(a.stdout, msg)
	}
	if _, ahead, err := schemaAhead(ctx, pool); err == nil && ahead != "" {
		fmt.Fprintln(a.stdout, ahead)
	}
	return nil
}

// connectOperator connects inspect, doctor, recover and prune to the database (a pool of two)
// and warns when a newer pgadmit migrated it, or when it lacks migrations of this one. The
// caller closes the pool.
func (a *app) connectOperator(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := a.connect(ctx, a.dsn, 2)
	if err != nil {
		return nil, err
	}
	a.schemaVersion, a.schemaBehind = checkOperatorSchema(ctx, pool, a.warn)
	return pool, nil
}

// checkOperatorSchema reads the schema version of pool's database once, for inspect, doctor,
// recover and prune. It warns on stderr when a newer pgadmit migrated the database, whose
// tables and functions this one may misread, and returns, when the database lacks some of the
// migrations this binary embeds, what to say of it and what to run ("" otherwise): the operator
// commands may still work there (the tables and functions they use can be older than the
// latest migration), but a gateway built with this pgadmit would not. A failure to read the
// version is left to the command's own statements to report, except a role that may not read
// it (the version table's SELECT missing from its grants), which is warned of: the commands
// may work without it, but the check would be skipped in silence. It warns with warn (a.warn, or
// the sweeper's, which says only what checks that returned found). It also returns the version
// it read, for doctor's and inspect's --json (nil when it could not be read).
func checkOperatorSchema(ctx context.Context, pool *pgxpool.Pool, warn func(string, ...any)) (version *int64, behind string) {
	v, latest, err := schemaVersions(ctx, pool)
	if err == nil {
		version = &v
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		warn("cannot read the schema version, so it is not checked against this pgadmit's migrations: %s; the grants of docs/privileges.sql let a role read %s", pgErr.Message, schema.VersionTable)
	case err != nil:
	case v > latest:
		warn("%s: this pgadmit may misread it; upgrade pgadmit", aheadOf(v, latest))
	case v == 0:
		if zero := versionZeroAdvice(ctx, pool, latest); zero != "" {
			return version, zero
		}
		fallthrough
	case v < latest:
		return version, fmt.Sprintf("schema version %d is behind this pgadmit's migrations, which end at %d: run 'pgadmit migrate up'", v, latest)
	}
	return version, ""
}

// schemaAhead reads pool's database's pgadmit schema version and says, when it is above every
// migration this binary embeds (a newer pgadmit migrated it), that it is; "" otherwise.
func schemaAhead(ctx context.Context, pool *pgxpool.Pool) (have int64, ahead string, err error) {
	have, latest, err := schemaVersions(ctx, pool)
	if err != nil {
		return 0, "", err
	}
	if have > latest {
		ahead = aheadOf(have, latest)
	}
	return have, ahead, nil
}

// aheadOf says that schema version v is newer than latest, this binary's last migration.
func aheadOf(v, latest int64) string {
	return fmt.Sprintf("schema version %d is newer than this pgadmit's migrations, which end at %d", v, latest)
}

// passedTo says, for a step up or down to version to (-1: none given), when the database it
// left at version is already on the far side of to: up --to 3 on a database at 7 does nothing,
// and should not pass for having reached 3.
func passedTo(sub string, to int64) func(version int64) string {
	return func(version int64) string {
		switch {
		case to < 0 || version == to:
			return ""
		case sub == "up" && version > to:
			return fmt.Sprintf("already past version %d (to revert to it: pgadmit migrate down --to %d)", to, to)
		case sub == "down" && version < to:
			return fmt.Sprintf("already below version %d (to apply up to it: pgadmit migrate up --to %d)", to, to)
		}
		return ""
	}
}

// migrateStepError is the error of a step that failed: the migration that failed and how, from
// goose's partial migration error. Where the schema package said that the context had ended
// (a migration whose transaction database/sql rolled back fails with sql.ErrTxDone, which does
// not name it), that stays said, and err still matches ctx's error: an interrupt is then said
// as one, not as a transaction "already committed or rolled back".
func migrateStepError(ctx context.Context, err error) error {
	var perr *goose.PartialError
	if !errors.As(err, &perr) || perr.Failed == nil {
		return err
	}
	if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) && !errors.Is(perr.Err, cerr) {
		return fmt.Errorf("%s %s failed: %w (the context had ended: %w)", perr.Failed.Direction, perr.Failed.Source.Path, perr.Err, cerr)
	}
	return fmt.Errorf("%s %s failed: %w", perr.Failed.Direction, perr.Failed.Source.Path, perr.Err)
}
