package pgbouncer_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/peterldowns/pgtestdb"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgbouncer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// backendPids runs two transactions, one after the other, on one client connection through
// url, while another client keeps a transaction open between them, and returns the server
// sessions (backend pids) the two ran on.
func backendPids(t *testing.T, url string) (first, second int32) {
	t.Helper()
	ctx := context.Background()
	open := func() *pgx.Conn {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatalf("connect through pgbouncer: %v", err)
		}
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	q := dbtest.New()
	client, other := open(), open()
	first, err := q.OpsBackendPid(ctx, client)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := q.OpsBackendPid(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if second, err = q.OpsBackendPid(ctx, client); err != nil {
		t.Fatal(err)
	}
	return first, second
}

// In transaction pooling mode a client's next transaction may run on another server session;
// in session mode it never does. Stop ends PgBouncer and removes its directory.
func TestPoolModes(t *testing.T) {
	t.Parallel()
	pooled, direct := pgtest.NewPoolerURL(t)
	if a, b := backendPids(t, pooled); a == b {
		t.Errorf("transaction pooling: both transactions ran on session %d; want another one for the second", a)
	}

	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	b, err := pgbouncer.Start(context.Background(), pgbouncer.Config{
		ServerHost: u.Hostname(), ServerPort: port, PoolMode: "session", PoolSize: 2,
		Users: map[string]string{u.User.Username(): password, pgtestdb.DefaultRoleUsername: pgtestdb.DefaultRolePassword},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer b.Stop()
	u.Host = net.JoinHostPort(pgbouncer.Host, strconv.Itoa(b.Port()))
	if a, c := backendPids(t, u.String()); a != c {
		t.Errorf("session pooling: the transactions ran on sessions %d and %d; want one", a, c)
	}

	if err := b.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(b.Dir()); !os.IsNotExist(err) {
		t.Errorf("directory %s after Stop: %v", b.Dir(), err)
	}
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = c.Close()
		t.Errorf("%s still accepts connections after Stop", u.Host)
	}
}
