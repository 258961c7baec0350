package pgtest

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/schema"
)

func TestMain(m *testing.M) {
	if os.Getenv(holdClusterEnv) == "1" {
		holdCluster()
	}
	os.Exit(Main(m))
}

// migrationCount is the number of embedded migrations, hence the version a migrated database
// must report when versions are numbered 1, 2, 3...
func migrationCount(t *testing.T) int {
	t.Helper()
	names, err := fs.Glob(schema.FS, "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("no migrations embedded: %v", err)
	}
	return len(names)
}

// assertMigrated checks that every migration is applied on the database of pool.
func assertMigrated(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	st, err := schema.Status(ctx, pool)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if len(st) != migrationCount(t) {
		t.Fatalf("status lists %d migrations, want %d", len(st), migrationCount(t))
	}
	for _, s := range st {
		if s.State != goose.StateApplied {
			t.Errorf("migration %s is %s, want applied", s.Source.Path, s.State)
		}
	}
}

func TestNewPoolIsMigrated(t *testing.T) {
	t.Parallel()
	pool := NewPool(t)
	if os.Getenv("DATABASE_URL") == "" {
		t.Logf("throwaway cluster started in %s", clusterStartup)
	}
	assertMigrated(t, pool)
}

func TestNewPoolDatabasesAreDistinct(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := NewPool(t), NewPool(t)
	if a.Config().ConnConfig.Database == b.Config().ConnConfig.Database {
		t.Fatalf("two NewPool calls share database %q", a.Config().ConnConfig.Database)
	}
	// Reverting the schema of one database leaves the other untouched.
	if err := schema.Down(ctx, a); err != nil {
		t.Fatalf("down: %v", err)
	}
	if v, err := schema.Version(ctx, a); err != nil || v != 0 {
		t.Fatalf("version after down = %d, %v; want 0", v, err)
	}
	assertMigrated(t, b)
}

func TestNewPoolsShareOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pools := NewPools(t, 3)
	if len(pools) != 3 {
		t.Fatalf("got %d pools, want 3", len(pools))
	}
	for _, p := range pools[1:] {
		if p == pools[0] {
			t.Fatal("NewPools returned the same pool twice")
		}
		if got, want := p.Config().ConnConfig.Database, pools[0].Config().ConnConfig.Database; got != want {
			t.Fatalf("pool on database %q, want %q", got, want)
		}
	}
	// A change made through one pool is seen through the others.
	if err := schema.Down(ctx, pools[0]); err != nil {
		t.Fatalf("down: %v", err)
	}
	for i, p := range pools {
		if v, err := schema.Version(ctx, p); err != nil || v != 0 {
			t.Fatalf("pool %d: version after down = %d, %v; want 0", i, v, err)
		}
	}
}

func TestNewURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, NewURL(t))
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	defer pool.Close()
	assertMigrated(t, pool)
	v, err := schema.Version(ctx, pool)
	if err != nil {
		t.Fatalf("version: %v", err)
	}
	if want := int64(migrationCount(t)); v != want {
		t.Fatalf("version = %d, want %d", v, want)
	}
}

func TestMigratorHashIsStable(t *testing.T) {
	t.Parallel()
	h1, err := migrator{}.Hash()
	if err != nil {
		t.Fatal(err)
	}
	h2, err := migrator{}.Hash()
	if err != nil {
		t.Fatal(err)
	}
	if h1 != h2 || h1 == "" {
		t.Fatalf("hashes %q and %q; want equal and non-empty", h1, h2)
	}
}

func TestConfigFromURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn  string
		want string // pgtestdb's URL of the parsed config
	}{
		{
			"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
			"postgres://postgres:@127.0.0.1:5432/postgres?sslmode=disable",
		},
		{
			"postgresql://u:p%40ss@db.example:6543/app?sslmode=require&application_name=x",
			"postgres://u:p%40ss@db.example:6543/app?application_name=x&sslmode=require",
		},
		{
			"host=/var/run/postgresql port=5433 user=me dbname=d sslmode=disable",
			"postgres://me:@:5433/d?host=%2Fvar%2Frun%2Fpostgresql&sslmode=disable",
		},
		{
			"postgres://me@[::1]:5432/d",
			"postgres://me:@[::1]:5432/d?",
		},
	} {
		conf, err := configFromURL(tc.dsn)
		if err != nil {
			t.Errorf("configFromURL(%q): %v", tc.dsn, err)
			continue
		}
		if got := conf.URL(); got != tc.want {
			t.Errorf("configFromURL(%q).URL() = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}

// Two stopCluster calls at once (the signal handler's and Main's, when an interrupt also ends
// m.Run: go test -fuzz stopping its workers does that) both return only once the cluster is
// stopped and its directory removed: the one that comes second must not return, and let the
// process exit, while the first is still removing it. Not parallel: it stands in its own cluster
// for the package's.
func TestStopClusterTwiceWaitsForTheStop(t *testing.T) {
	for round := 1; round <= 3 && !t.Failed(); round++ {
		c, err := pgcluster.Start(context.Background())
		if err != nil {
			t.Skipf("no throwaway cluster: %v", err)
		}
		t.Cleanup(func() { _ = c.Stop() })
		clusterMu.Lock()
		saved := running
		running = c
		clusterMu.Unlock()

		first := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			close(first)
			stopCluster()
		}()
		<-first
		stopCluster()
		if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("round %d: stopCluster returned while the cluster's directory %s still exists (stat: %v)", round, c.Dir(), err)
		}
		<-done

		clusterMu.Lock()
		running = saved
		clusterMu.Unlock()
	}
}

// When a NewPoolerURL test ends, its PgBouncer is gone before the database is dropped: nothing
// can open a server connection to the database during the drop (a shared PgBouncer finishing a
// late login once made it fail with "being accessed by other users"), and the drop succeeds.
func TestPoolerStopsBeforeTheDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var pooled, direct string
	t.Run("pooler", func(t *testing.T) {
		pooled, direct = NewPoolerURL(t)
		conn, err := pgx.Connect(ctx, pooled)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		if err := conn.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
	u, err := url.Parse(pooled)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("the PgBouncer at %s still accepts connections after its test ended", u.Host)
	}
	conn, err := pgx.Connect(ctx, direct)
	if err == nil {
		_ = conn.Close(ctx)
	}
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
		t.Errorf("connecting to the test's database after it ended: %v, want it dropped (3D000)", err)
	}
}
