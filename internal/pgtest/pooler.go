package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"

	"github.com/pgadmit/pgadmit/internal/pgbouncer"
)

// PoolerSize is how many server connections the tests' PgBouncer opens per database: fewer than
// the client connections of a test's pools, so that their transactions share server
// connections, as they do in production behind a pooler.
const PoolerSize = 4

var (
	poolerMu   sync.Mutex
	poolerOnce sync.Once
	pooler     *pgbouncer.Bouncer // the started PgBouncer, until stopPooler
	poolerErr  error
)

// startPooler starts, once per test process, a PgBouncer in transaction pooling mode in front of
// the test server (DATABASE_URL's, or the throwaway cluster), which the test role and the
// server's own role may log in through.
func startPooler() (*pgbouncer.Bouncer, error) {
	poolerOnce.Do(func() {
		base, err := server()
		if err != nil {
			poolerErr = err
			return
		}
		host, port, err := serverAddress(base)
		if err != nil {
			poolerErr = err
			return
		}
		users := map[string]string{pgtestdb.DefaultRoleUsername: pgtestdb.DefaultRolePassword}
		if u, err := url.Parse("postgres://" + base.User + ":" + base.Password + "@x/"); err == nil {
			pw, _ := u.User.Password()
			users[u.User.Username()] = pw
		}
		b, err := pgbouncer.Start(context.Background(), pgbouncer.Config{
			ServerHost: host, ServerPort: port, Users: users, PoolMode: "transaction", PoolSize: PoolerSize,
		})
		if err != nil {
			poolerErr = fmt.Errorf("pgtest: %w", err)
			return
		}
		poolerMu.Lock()
		pooler = b
		poolerMu.Unlock()
	})
	return pooler, poolerErr
}

// stopPooler stops the PgBouncer, if one runs. It is safe to call more than once.
func stopPooler() {
	poolerMu.Lock()
	b := pooler
	pooler = nil
	poolerMu.Unlock()
	if b != nil {
		_ = b.Stop()
	}
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
// returns its connection string through the test process's PgBouncer, in transaction pooling
// mode with PoolerSize server connections (started on first use, stopped by [Main]), and the
// direct one. The database is dropped when t passes, after the connections PgBouncer keeps to it
// are terminated; connections of the test to it must be closed by then.
func NewPoolerURL(t testing.TB) (pooled, direct string) {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatalf("pgtest: this test package needs func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }")
	}
	b, err := startPooler()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	base, err := server()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	base.ForceTerminateConnections = true // PgBouncer keeps idle server connections to it
	conf := pgtestdb.Custom(t, base, migrator{})
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(conf.User, conf.Password),
		Host:     pgbouncer.Host + ":" + strconv.Itoa(b.Port()),
		Path:     "/" + conf.Database,
		RawQuery: "sslmode=disable",
	}
	return u.String(), conf.URL()
}

// NewPoolerPools returns n pgx pools on one fresh migrated database, all through the test
// process's PgBouncer in transaction pooling mode, executing statements in mode. The pools are
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
