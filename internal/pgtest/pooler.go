package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"

	"github.com/pgadmit/pgadmit/internal/pgbouncer"
	"github.com/pgadmit/pgadmit/internal/pgcluster"
)

// PoolerSize is how many server connections the tests' PgBouncer opens per database: fewer than
// the client connections of a test's pools, so that their transactions share server
// connections, as they do in production behind a pooler.
const PoolerSize = 4

// startBouncer starts a PgBouncer in poolMode with poolSize server connections per database in
// front of the test server, which the test role and the server's own role may log in through.
func startBouncer(poolMode string, poolSize int) (*pgbouncer.Bouncer, error) {
	base, host, port, err := serverForBouncer()
	if err != nil {
		return nil, err
	}
	return startBouncerTo(host, port, base, poolMode, poolSize)
}

// serverForBouncer returns the test server's configuration and where PgBouncer reaches it.
func serverForBouncer() (base pgtestdb.Config, host string, port int, err error) {
	if base, err = server(); err != nil {
		return base, "", 0, err
	}
	host, port, err = serverAddress(base)
	return base, host, port, err
}

// startBouncerTo is startBouncer with the server reached at host and port, which may be a proxy
// in front of base's.
func startBouncerTo(host string, port int, base pgtestdb.Config, poolMode string, poolSize int) (*pgbouncer.Bouncer, error) {
	users := map[string]string{pgtestdb.DefaultRoleUsername: pgtestdb.DefaultRolePassword}
	if u, err := url.Parse("postgres://" + base.User + ":" + base.Password + "@x/"); err == nil {
		pw, _ := u.User.Password()
		users[u.User.Username()] = pw
	}
	b, err := pgbouncer.Start(context.Background(), pgbouncer.Config{
		ServerHost: host, ServerPort: port, Users: users, PoolMode: poolMode, PoolSize: poolSize,
	})
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	return b, nil
}

// serverAddress is where PgBouncer reaches the test server: a TCP host and port, or a Unix
// socket directory (given as host= in the connection options) and port.
func serverAddress(c pgtestdb.Config) (string, int, error) {
	port, err := strconv.Atoi(c.Port)
	if err != nil {
		return "", 0, fmt.Errorf("pgtest: server port %q: %w", c.Port, err)
	}
	if c.Host != "" {
		return c.Host, port, nil
	}
	opts, err := url.ParseQuery(c.Options)
	if err != nil || opts.Get("host") == "" {
		return "", 0, fmt.Errorf("pgtest: no server host for PgBouncer in %q", c.Options)
	}
	return opts.Get("host"), port, nil
}

// NewPoolerURL creates a fresh database migrated to pgadmit's latest schema, as NewURL does, and
// returns its connection string through a PgBouncer of t's own, in transaction pooling mode with
// PoolerSize server connections, and the direct one. The PgBouncer is stopped when t ends, so
// that nothing can open a connection to the database any more, and then the database is dropped
// if t passed; connections of the test to it must be closed by then.
//
// A PgBouncer shared by the tests of a process would keep opening server connections after a
// test's end: one it began logging in for a client that has since gone finishes its login
// later, and then the drop fails with "database is being accessed by other users" (it did once
// in CI).
func NewPoolerURL(t testing.TB) (pooled, direct string) {
	t.Helper()
	return NewPoolerURLIn(t, "transaction", PoolerSize)
}

// NewPoolerURLIn is NewPoolerURL through a PgBouncer of t's own, started in poolMode (session,
// transaction or statement) with poolSize server connections and stopped when t ends, before
// the database is dropped.
func NewPoolerURLIn(t testing.TB, poolMode string, poolSize int) (pooled, direct string) {
	t.Helper()
	return newOwnPoolerURL(t, poolMode, poolSize, startBouncer)
}

// NewRestartablePoolerURL is NewPoolerURLIn, and returns restart too, which ends the PgBouncer
// at once (every client and server connection closed) and starts it again on the same port.
func NewRestartablePoolerURL(t testing.TB, poolMode string, poolSize int) (pooled, direct string, restart func() error) {
	t.Helper()
	var b *pgbouncer.Bouncer
	pooled, direct = newOwnPoolerURL(t, poolMode, poolSize, func(poolMode string, poolSize int) (*pgbouncer.Bouncer, error) {
		var err error
		b, err = startBouncer(poolMode, poolSize)
		return b, err
	})
	return pooled, direct, func() error { return b.Restart(context.Background()) }
}

// NewSlowPoolerURL is NewPoolerURLIn with PgBouncer reaching the server through a proxy that
// opens each server connection connectDelay late: a busy pooler, which takes that long to
// forward a cancel request (PgBouncer opens a server connection for each).
func NewSlowPoolerURL(t testing.TB, poolMode string, poolSize int, connectDelay time.Duration) (pooled, direct string) {
	t.Helper()
	return newOwnPoolerURL(t, poolMode, poolSize, func(poolMode string, poolSize int) (*pgbouncer.Bouncer, error) {
		base, host, port, err := serverForBouncer()
		if err != nil {
			return nil, err
		}
		proxy, err := startSlowDialProxy(host, port, connectDelay)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		t.Cleanup(proxy.Close) // runs after PgBouncer's Stop, registered later
		return startBouncerTo(pgbouncer.Host, proxy.Port(), base, poolMode, poolSize)
	})
}

// newOwnPoolerURL is NewPoolerURLIn with PgBouncer started by start.
func newOwnPoolerURL(t testing.TB, poolMode string, poolSize int,
	start func(poolMode string, poolSize int) (*pgbouncer.Bouncer, error)) (pooled, direct string) {
	t.Helper()
	return newOwnPoolerURLOf(t, migrator{}, poolMode, poolSize, start)
}

// NewEmptyPoolerURLIn is NewPoolerURLIn on a fresh database that pgadmit never migrated (no
// pgadmit table, not even the version table), as [NewEmptyURL]'s.
func NewEmptyPoolerURLIn(t testing.TB, poolMode string, poolSize int) (pooled, direct string) {
	t.Helper()
	return newOwnPoolerURLOf(t, pgtestdb.NoopMigrator{}, poolMode, poolSize, startBouncer)
}

// newOwnPoolerURLOf is newOwnPoolerURL on a fresh database that m migrated.
func newOwnPoolerURLOf(t testing.TB, m pgtestdb.Migrator, poolMode string, poolSize int,
	start func(poolMode string, poolSize int) (*pgbouncer.Bouncer, error)) (pooled, direct string) {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatalf("pgtest: this test package needs func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }")
	}
	var b *pgbouncer.Bouncer
	pooled, direct = poolerURL(t, m, func() int {
		var err error
		if b, err = start(poolMode, poolSize); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		return b.Port()
	})
	t.Cleanup(func() { // runs before the database's cleanup, registered earlier
		if t.Failed() { // say whether the pooler itself failed (it logs a FATAL before it exits)
			t.Logf("pgbouncer.log:\n%s", pgcluster.Tail(filepath.Join(b.Dir(), "pgbouncer.log")))
		}
		_ = b.Stop()
	})
	return pooled, direct
}

// poolerURL creates a fresh database that m migrated and returns its connection string through
// the PgBouncer listening on port(), called once the database exists, and the direct one.
func poolerURL(t testing.TB, m pgtestdb.Migrator, port func() int) (pooled, direct string) {
	t.Helper()
	base, err := server()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	base.ForceTerminateConnections = true // PgBouncer keeps idle server connections to it
	conf := pgtestdb.Custom(t, base, m)
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(conf.User, conf.Password),
		Host:     pgbouncer.Host + ":" + strconv.Itoa(port()),
		Path:     "/" + conf.Database,
		RawQuery: "sslmode=disable",
	}
	return u.String(), conf.URL()
}

// NewPoolerPools returns n pgx pools on one fresh migrated database, all through a PgBouncer of
// t's own ([NewPoolerURL]) in transaction pooling mode, executing statements in mode. The pools are
// closed, and the database dropped, when t ends (kept if t failed).
func NewPoolerPools(t testing.TB, n int, mode pgx.QueryExecMode) []*pgxpool.Pool {
	t.Helper()
	pooled, _ := NewPoolerURL(t)
	cfg, err := pgxpool.ParseConfig(pooled)
	if err != nil {
		t.Fatalf("pgtest: parse pooler URL: %v", err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = mode
	pools := make([]*pgxpool.Pool, 0, n)
	for range n {
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg.Copy())
		if err != nil {
			t.Fatalf("pgtest: open pool through PgBouncer: %v", err)
		}
		t.Cleanup(pool.Close)
		pools = append(pools, pool)
	}
	return pools
}
