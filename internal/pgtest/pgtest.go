// Package pgtest gives every pgadmit test a real, migrated, isolated PostgreSQL database.
//
// Each call to [NewPool], [NewPools] or [NewURL] creates a fresh database cloned (by pgtestdb)
// from a template database to which pgadmit's migrations (package schema) were applied once per
// content hash of those migrations; cloning takes milliseconds, so tests stay parallel and fast.
// The database is dropped when the test passes and kept, its URL logged, when it fails.
//
// The server comes from DATABASE_URL when it is set: the role in it must be allowed to create
// roles and databases (pgtestdb creates a role "pgtdbuser" and the databases "testdb_tpl_*").
// When DATABASE_URL is unset, pgtest starts a throwaway cluster (package pgcluster) once per
// test process with the initdb, pg_ctl and postgres binaries found on PATH or in `pg_config
// --bindir`, and stops it when the tests end. Running as root, it runs those binaries as the
// "postgres" system user.
//
// [NewPoolerURL] and [NewPoolerPools] reach such a database through a PgBouncer of the test's
// own in transaction pooling mode (package pgbouncer), started in front of the same server and
// stopped when the test ends; PgBouncer must be installed (`apt-get install pgbouncer`).
// [NewPoolerURLIn] chooses the pool mode and size.
//
// Every test package that uses pgtest declares:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// and its tests then ask for a database:
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := pgtest.NewPool(t)
//		// use pool; it is closed, and its database dropped, when the test ends.
//	}
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver pgtestdb uses
	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/common"

	"github.com/pgadmit/pgadmit/schema"
)

// mainCalled records that the test binary runs through [Main], which stops the throwaway
// cluster; without it a started cluster would outlive the tests.
var mainCalled atomic.Bool

// Main runs the tests of m and returns their exit code; afterwards, also when tests failed, it
// stops the throwaway cluster if this process started one. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
// SIGINT and SIGTERM also stop the cluster before the process dies. A cluster left behind by a
// process that died otherwise (a panic, a -timeout) is removed by the next test process that
// starts one.
func Main(m *testing.M) int {
	mainCalled.Store(true)
	defer stopCluster()
	defer dropExampleDatabase() // before the cluster stops
	return m.Run()
}

// NewURL creates a fresh database, migrated to pgadmit's latest schema, and returns its
// connection string. The database is dropped when t passes (connections to it must be closed by
// then) and kept for inspection when t fails.
func NewURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, migrator{})
}

// newDatabase creates a fresh database that m prepared and returns its connection string.
func newDatabase(t testing.TB, m pgtestdb.Migrator) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatalf("pgtest: this test package needs func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }")
	}
	base, err := server()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return pgtestdb.Custom(t, base, m).URL()
}

// NewPool returns a pgx pool on a fresh database, migrated to pgadmit's latest schema. The pool
// is closed, and the database dropped, when t ends (the database is kept if t failed).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPools(t, 1)[0]
}

// NewPools returns n separate pgx pools on one and the same fresh, migrated database: each
// stands for one gateway instance sharing the database. The pools are closed, and the database
// dropped, when t ends (the database is kept if t failed).
func NewPools(t testing.TB, n int) []*pgxpool.Pool {
	t.Helper()
	if n < 1 {
		t.Fatalf("pgtest: NewPools(t, %d): need at least one pool", n)
	}
	dsn := NewURL(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: parse test database URL: %v", err)
	}
	pools := make([]*pgxpool.Pool, 0, n)
	for range n {
		// Cleanups run last-in first-out, so the pools close before pgtestdb drops the database.
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg.Copy())
		if err != nil {
			t.Fatalf("pgtest: open pool: %v", err)
		}
		t.Cleanup(pool.Close)
		pools = append(pools, pool)
	}
	return pools
}

// OpenPool opens a pgx pool on url (a database of [NewURL], as whichever role it names), closed
// when t ends.
func OpenPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// migrator builds pgtestdb's template database with pgadmit's own goose provider (never goose's
// globals, and never pgtestdb's goosemigrator, which uses them).
type migrator struct{}

// Hash identifies the migrated template: it covers the version table name and the name and bytes
// of every embedded migration, so any change to a migration yields a new template.
func (migrator) Hash() (string, error) {
	h := common.NewRecursiveHash(common.Field("VersionTable", schema.VersionTable))
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil {
		return "", fmt.Errorf("list migrations: %w", err)
	}
	for _, name := range names {
		b, err := fs.ReadFile(schema.FS, name)
		if err != nil {
			return "", fmt.Errorf("read migration %s: %w", name, err)
		}
		h.AddField("Migration", name)
		h.Add(b)
	}
	return h.String(), nil
}

// Migrate applies every migration to the template database db. It leaves db open: pgtestdb
// owns and closes it.
func (migrator) Migrate(ctx context.Context, db *sql.DB, _ pgtestdb.Config) error {
	p, err := schema.NewProvider(db)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return nil
}

var (
	serverOnce sync.Once
	serverConf pgtestdb.Config
	serverErr  error
)

// server returns the connection settings of the server that hosts the test databases: the one
// of DATABASE_URL, or a throwaway cluster started on first use.
func server() (pgtestdb.Config, error) {
	serverOnce.Do(func() {
		if dsn := os.Getenv("DATABASE_URL"); dsn != "" {
			serverConf, serverErr = configFromURL(dsn)
			if serverErr != nil {
				serverErr = fmt.Errorf("DATABASE_URL: %w", serverErr)
			}
			return
		}
		serverConf, serverErr = startCluster()
	})
	return serverConf, serverErr
}

// configFromURL turns a libpq connection string (URL or keyword/value form) into the pieces
// pgtestdb.Config wants. pgtestdb formats them back into a URL without escaping, so the pieces
// are escaped here.
func configFromURL(dsn string) (pgtestdb.Config, error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return pgtestdb.Config{}, err
	}
	// Extra parameters (sslmode and the like) are carried over as given; the ones pgtestdb
	// sets itself, or that name the server and credentials, are not.
	opts := url.Values{}
	keep := func(k, v string) {
		switch k {
		case "host", "hostaddr", "port", "user", "password", "dbname":
		default:
			opts.Set(k, v)
		}
	}
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return pgtestdb.Config{}, err
		}
		for k, vs := range u.Query() {
			if len(vs) > 0 {
				keep(k, vs[len(vs)-1])
			}
		}
	} else {
		for _, f := range strings.Fields(dsn) {
			if k, v, ok := strings.Cut(f, "="); ok {
				keep(k, strings.Trim(v, "'"))
			}
		}
	}
	if opts.Get("sslmode") == "" && pc.TLSConfig == nil {
		opts.Set("sslmode", "disable")
	}
	host := pc.Host
	switch {
	case strings.HasPrefix(host, "/"): // Unix socket directory: only expressible as a parameter.
		opts.Set("host", host)
		host = ""
	case strings.Contains(host, ":"): // IPv6 literal.
		host = "[" + host + "]"
	}
	userinfo := url.UserPassword(pc.User, pc.Password).String()
	user, password, _ := strings.Cut(userinfo, ":")
	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       host,
		Port:       strconv.Itoa(int(pc.Port)),
		User:       user,
		Password:   password,
		Database:   url.PathEscape(pc.Database),
		Options:    opts.Encode(),
	}, nil
}

// NewEmptyURL creates a fresh database that pgadmit never migrated (no pgadmit table, not even
// the version table) and returns its connection string. It is dropped as [NewURL]'s are.
func NewEmptyURL(t testing.TB) string {
	t.Helper()
	return newDatabase(t, pgtestdb.NoopMigrator{})
}
