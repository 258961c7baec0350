package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/schema"
)

// database returns the connection string a dbOptional command (demo, bench) works on: the
// given one, or that of a throwaway local cluster started now, which the returned stop removes.
// The cluster is on disk with PostgreSQL's durability on, so that commits cost what they cost
// on a real server, and preloads pg_stat_statements when the installation has it (for bench's
// report of server time). stop is never nil.
func (a *app) database(ctx context.Context) (dsn string, stop func(), err error) {
	if a.dsn != "" {
		return a.dsn, func() {}, nil
	}
	fmt.Fprintln(a.stderr, "DATABASE_URL is not set: starting a throwaway PostgreSQL cluster on disk (removed at the end)...")
	c, err := pgcluster.Start(ctx, pgcluster.OnDisk(), pgcluster.Preload("pg_stat_statements"))
	if err != nil {
		if errors.Is(err, pgcluster.ErrNoPostgres) {
			return "", func() {}, err
		}
		return "", func() {}, fmt.Errorf("start a throwaway cluster: %w", err)
	}
	fmt.Fprintf(a.stderr, "throwaway cluster up in %s at %s\n", c.Startup().Round(time.Millisecond), c.URL())
	fmt.Fprintf(a.stderr, "  %s\n", describeCluster(c))
	return c.URL(), func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintf(a.stderr, "warning: %v\n", err)
			return
		}
		fmt.Fprintln(a.stderr, "throwaway cluster stopped and removed")
	}, nil
}

// describeCluster says where a throwaway cluster lives and what that means for its numbers.
func describeCluster(c *pgcluster.Cluster) string {
	where := "on disk in " + c.Dir()
	if c.InMemory() {
		where = "in memory (tmpfs: commits cost nothing there, so timings flatter) in " + c.Dir()
	}
	durability := "fsync off"
	if c.Durable() {
		durability = "fsync and synchronous_commit on"
	}
	preload := "shared_preload_libraries empty"
	if libs := c.Preloaded(); len(libs) > 0 {
		preload = "shared_preload_libraries=" + strings.Join(libs, ",")
	}
	return where + ", " + durability + ", " + preload
}

// migrate applies pending migrations on pool's database and reports the resulting version. It
// warns when a newer pgadmit migrated the database (bench and demo would then run this one's
// statements against functions and tables it may misread). A session that may not write fails
// first (checkWritable), before anything runs. At version 0 it refuses as migrate up does,
// creating nothing, where pgadmit lives in a schema the search_path leaves out (refuseSecondCopy:
// it would install a second, empty pgadmit in the current schema) or the session has no current
// schema (noSchemaToInstallInto). bench and demo offer no --new-copy: migrate up's advice names
// that command, after which they run on the copy it installed.
func (a *app) migrate(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	if err := checkWritable(ctx, pool); err != nil {
		return 0, err
	}
	// The version, read before migrating, serves the checks, and is the result where nothing
	// is pending: the catalogs are read only at version 0, and the version again only after
	// migrations were pending.
	v, latest, err := schemaVersions(ctx, pool)
	if err != nil {
		return 0, err
	}
	if v == 0 {
		if err := refuseToInstall(readCatalogs(ctx, pool)); err != nil {
			return 0, err
		}
	}
	if err := schema.Migrate(ctx, pool); err != nil {
		return 0, err
	}
	if v < latest {
		if v, _, err = schemaVersions(ctx, pool); err != nil {
			return 0, err
		}
	}
	if v > latest {
		a.warn("%s: this pgadmit may misread it; upgrade pgadmit", aheadOf(v, latest))
	}
	return v, nil
}

// refuseToInstall is migrate up's refusal (without --new-copy) on a database at version 0 on the
// search_path, where catalogs is read: pgadmit is in another schema (refuseSecondCopy), or the
// session has no current schema (noSchemaToInstallInto). nil otherwise.
func refuseToInstall(catalogs *db.VersionTableElsewhereRow) error {
	if err := refuseSecondCopy(catalogs); err != nil {
		return err
	}
	return noSchemaToInstallInto(catalogs)
}

// migrationVersions lists the versions of pgadmit's embedded migrations, in ascending order.
func migrationVersions() ([]int64, error) {
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		return nil, err
	}
	versions := make([]int64, 0, len(names))
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, err
		}
		versions = append(versions, v)
	}
	slices.Sort(versions)
	return versions, nil
}

// schemaVersions returns the pgadmit schema version of pool's database and the latest migration
// this binary embeds.
func schemaVersions(ctx context.Context, pool *pgxpool.Pool) (have, latest int64, err error) {
	versions, err := migrationVersions()
	if err != nil {
		return 0, 0, err
	}
	if len(versions) == 0 {
		return 0, 0, errors.New("this pgadmit embeds no migrations")
	}
	have, err = schema.Version(ctx, pool)
	return have, versions[len(versions)-1], err
}

// schemaBehindError is a command's failure on a database whose pgadmit schema is older than
// this binary's: it says what to run instead of the server's "relation ... does not exist".
type schemaBehindError struct {
	have, want int64
	err        error // what the server said
	// zero, when not "", is what to say at version 0 in place of "run 'pgadmit migrate up'",
	// which would not do what it should there (versionZeroAdvice).
	zero string
}

func (e *schemaBehindError) Error() string {
	if e.zero != "" {
		return e.zero
	}
	return fmt.Sprintf("the database's pgadmit schema is at version %d, this pgadmit needs %d: run 'pgadmit migrate up'", e.have, e.want)
}

func (e *schemaBehindError) Unwrap() error { return e.err }

// notMigrated returns err as a *schemaBehindError when it is the server's refusal of a table,
// column or function that is missing (SQLSTATE 42P01, 42703, 42883) and pool's database has
// not applied every migration this binary embeds. Other errors pass through unchanged. It
// looks at the schema only after a failure, so that a command costs nothing more when it works.
//
// pctx, the context of the run's pass (passContext, or a sweeper's pass), bounds that read as it
// bounds the rest of the run: with the run's ctx, a server that stopped answering right after
// the refusal hung the run past --pass-timeout, and a sweeper for good. Once pctx has ended
// (cut off, interrupted), the version is not read and err passes unchanged, under the cut-off's
// message: a short bound of its own would keep the run past the bound it was given, for a hint
// that the server's own "does not exist" already points to.
func notMigrated(pctx context.Context, pool *pgxpool.Pool, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !slices.Contains([]string{"42P01", "42703", "42883"}, pgErr.Code) || pctx.Err() != nil {
		return err
	}
	have, latest, verr := schemaVersions(pctx, pool)
	if verr != nil || have >= latest {
		return err
	}
	sbe := &schemaBehindError{have: have, want: latest, err: err}
	if have == 0 {
		sbe.zero = versionZeroAdvice(pctx, pool, latest)
	}
	return sbe
}

// versionZeroAdvice is what the operator commands say of pool's database at version 0, where
// this pgadmit needs latest, when 'pgadmit migrate up' alone is not the fix: pgadmit's version
// table is in a schema the connection does not read it from (notMigrateUp), or the connection
// has no current schema, where up refuses (noCurrentSchema). "" otherwise, or when the catalogs
// could not be read.
func versionZeroAdvice(ctx context.Context, pool *pgxpool.Pool, latest int64) string {
	r := readCatalogs(ctx, pool)
	if r == nil {
		return ""
	}
	if w := elsewhereOf(*r); w != nil {
		return w.notMigrateUp()
	}
	if r.CurrentSchema == "" {
		return fmt.Sprintf("the database's pgadmit schema is at version 0, this pgadmit needs %d, and %s, then run 'pgadmit migrate up'", latest, noCurrentSchema(*r))
	}
	return ""
}

// noCurrentSchema says that the connection r was read on has no current schema to install
// pgadmit into, and how to give it one: what migrate up says where it refuses for that.
func noCurrentSchema(r db.VersionTableElsewhereRow) string {
	return fmt.Sprintf("this connection has no schema to install pgadmit into (no schema of its search_path, %s, exists that role %s may use): "+
		"create one, or put one first in the search_path (search_path=<schema> in the database URL, or set on the role: README, %q)",
		r.SearchPath, sqlIdentifier(r.RoleName), readmeOwnSchema)
}

// versionTableElsewhere is pgadmit's version table found in other schemas than the one a
// connection reads it from (its current schema, the first of its search_path that exists), where
// that one is at version 0: pgadmit was migrated into a schema of its own, which the
// connection's search_path leaves out (or puts after another). 'pgadmit migrate up' there
// would install a second, empty pgadmit in the current schema, that the tools would read while
// the gateways use the first.
type versionTableElsewhere struct {
	current    string   // the connection's current schema ("": none of its search_path exists)
	searchPath string   // its search_path setting
	schemas    []string // the other schemas that hold the version table, by name
	// role is the session's role (current_user), and noUsage those of schemas on which it has
	// no USAGE: PostgreSQL leaves them out of the search_path even where the setting names
	// them, so the fix there is the grant, which docs/privileges.sql gives.
	role    string
	noUsage []string
}

// elsewhereOf is where r, a read of the catalogs, found the version table besides the current
// schema, or nil when it found it in no other.
func elsewhereOf(r db.VersionTableElsewhereRow) *versionTableElsewhere {
	if len(r.OtherSchemas) == 0 {
		return nil
	}
	return &versionTableElsewhere{current: r.CurrentSchema, searchPath: r.SearchPath, schemas: r.OtherSchemas,
		role: r.RoleName, noUsage: r.WithoutUsage}
}

// String says what the connection sees, where the version table is, and how to put its schema
// on the search_path, as the README's "A schema of its own" does it.
func (w *versionTableElsewhere) String() string {
	msg := fmt.Sprintf("the database's pgadmit schema is at version 0 on this connection's search_path (%s), but pgadmit's version table %s is in ", w.searchPath, schema.VersionTable)
	role := sqlIdentifier(w.role)
	if len(w.schemas) == 1 {
		name := sqlIdentifier(w.schemas[0])
		how := fmt.Sprintf("(search_path=%s in the database URL, or set on the role: README, %q)", url.QueryEscape(name), readmeOwnSchema)
		if len(w.noUsage) == 1 {
			return msg + fmt.Sprintf("schema %s, on which role %s has no USAGE, so PostgreSQL leaves it out of the search_path: "+
				"GRANT USAGE ON SCHEMA %s TO %s (docs/privileges.sql grants it to its roles) and have that schema first in the search_path %s",
				name, role, name, role, how)
		}
		return msg + fmt.Sprintf("schema %s: put that schema first in the search_path %s", name, how)
	}
	names := make([]string, len(w.schemas))
	for i, s := range w.schemas {
		names[i] = sqlIdentifier(s)
	}
	msg += "schemas " + strings.Join(names, ", ")
	if len(w.noUsage) > 0 {
		unusable := make([]string, len(w.noUsage))
		for i, s := range w.noUsage {
			unusable[i] = sqlIdentifier(s)
		}
		msg += fmt.Sprintf(" (role %s has no USAGE on %s, so PostgreSQL leaves it out of the search_path)", role, strings.Join(unusable, ", "))
	}
	msg += fmt.Sprintf(": put the one this pgadmit should use first in the search_path (search_path=<schema> in the database URL, or set on the role: README, %q)", readmeOwnSchema)
	if len(w.noUsage) > 0 {
		msg += fmt.Sprintf(", and GRANT USAGE ON SCHEMA <schema> TO %s if it has none (docs/privileges.sql grants it to its roles)", role)
	}
	return msg
}

// readmeOwnSchema is the README's paragraph on keeping pgadmit in a schema of its own, which
// shows how to set a role's search_path.
const readmeOwnSchema = "A schema of its own"

// secondCopy names what 'pgadmit migrate up --new-copy' would install on this connection, one
// with a current schema.
func (w *versionTableElsewhere) secondCopy() string {
	return "a second pgadmit in schema " + sqlIdentifier(w.current)
}

// notMigrateUp is what the operator commands say in place of "run 'pgadmit migrate up'": where
// the connection has no current schema, up refuses, installing nothing, and the advice is
// String's alone.
func (w *versionTableElsewhere) notMigrateUp() string {
	if w.current == "" {
		return w.String()
	}
	return w.String() + ", not 'pgadmit migrate up', which would install " + w.secondCopy()
}

// plainIdentifier matches a schema name that needs no quotes in SQL.
var plainIdentifier = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// sqlIdentifier is name as SQL writes it: bare when it may be, else double-quoted.
func sqlIdentifier(name string) string {
	if plainIdentifier.MatchString(name) {
		return name
	}
	return pgx.Identifier{name}.Sanitize()
}

// serverInfo is what bench says about the server it measures.
type serverInfo struct {
	Version                  string // server_version
	Fsync, SynchronousCommit string
}

// String returns, e.g., "PostgreSQL 15.2, fsync on, synchronous_commit on".
func (s serverInfo) String() string {
	return fmt.Sprintf("PostgreSQL %s, fsync %s, synchronous_commit %s", s.Version, s.Fsync, s.SynchronousCommit)
}

// describeServer reads the server's version and the settings that decide what a commit costs.
func describeServer(ctx context.Context, pool *pgxpool.Pool) (serverInfo, error) {
	var info serverInfo
	q := db.New()
	for _, s := range []struct {
		name string
		to   *string
	}{{"server_version", &info.Version}, {"fsync", &info.Fsync}, {"synchronous_commit", &info.SynchronousCommit}} {
		v, err := q.BenchServerSetting(ctx, pool, s.name)
		if err != nil {
			return info, fmt.Errorf("read setting %s: %w", s.name, err)
		}
		*s.to = v
	}
	return info, nil
}
