package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/deadserver"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// When the server stops mid-run, the run stops after the first workload whose every operation
// failed to reach it (its row is still reported), rather than go through the others, each for
// its full duration, before failing. Which workloads began is what shows it: the run used to
// be required to take under 2 s, a bound that counted the server's shutdown and W1 too and
// sat only 300ms (W3's duration) above a run that went on to W3.
func TestRunStopsWhenTheServerIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := pgtest.OwnCluster(t) // stopping a server needs a cluster of the test's own
	pool, err := pgxpool.New(ctx, cluster.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var reported []Result
	var begun []string
	cfg := Config{Workers: 2, Duration: 300 * time.Millisecond, Only: []string{"W1", "W2", "W3"},
		BeforeEach: func(_ context.Context, w Workload, _ int) error {
			begun = append(begun, w.Code)
			if w.Code == "W2" {
				return cluster.Stop()
			}
			return nil
		}}
	start := time.Now()
	results, err := Run(ctx, pool, cfg, func(r Result) { reported = append(reported, r) })
	// Loose, so that load cannot reach it: it catches operations that hang on the stopped
	// server instead of failing (a run of 300ms workloads that stops after W2).
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Run with the server stopped before W2 took %s, want it to stop within 30s", took)
	}
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Run with the server stopped before W2: %v, want ErrUnreachable", err)
	}
	if len(results) != 2 || len(reported) != 2 || results[1].Code() != "W2" || results[0].Errors != 0 ||
		results[1].Ops != 0 || results[1].Errors == 0 {
		t.Errorf("Run with the server stopped before W2: %+v, want W1 fine and W2 all errors, then nothing", results)
	}
	if !slices.Equal(begun, []string{"W1", "W2"}) {
		t.Errorf("Run with the server stopped before W2 began %v, want W1 and W2 only", begun)
	}
	if !strings.Contains(err.Error(), "W2") {
		t.Errorf("Run's error %q does not name W2, the workload it stopped after", err)
	}
	t.Logf("%v", err)
}

// A broken connection or a server shutting down did not reach the database; a live server's
// answer, a refusal or a cancellation did.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		fmt.Errorf("reserve: %w", io.ErrUnexpectedEOF):                    true,
		&net.OpError{Op: "dial", Err: errors.New("connection refused")}:   true,
		&pgconn.PgError{Code: "57P01", Message: "terminating connection"}: true,
		&pgconn.PgError{Code: "08006", Message: "connection failure"}:     true,
		&pgconn.PgError{Code: "40P01", Message: "deadlock detected"}:      false,
		&pgconn.PgError{Code: "57014", Message: "canceling statement"}:    false,
		fmt.Errorf("reserve: %w", ratelimit.ErrExceeded):                  false,
		context.Canceled: false,
		errors.New("ratelimit: reserve: validation failed"): false,
	} {
		if got := unreachable(err); got != want {
			t.Errorf("unreachable(%v) = %v, want %v", err, got, want)
		}
	}
}

// connectError is the error of a connection attempt whose dial fails with cause, as pgconn
// wraps it (a *pgconn.ConnectError; a server's refusal at startup is wrapped alike).
func connectError(t *testing.T, cause error) error {
	t.Helper()
	cfg, err := pgconn.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) { return nil, cause }
	conn, err := pgconn.ConnectConfig(context.Background(), cfg)
	if err == nil {
		conn.Close(context.Background())
		t.Fatal("connect with a failing dial succeeded")
	}
	return err
}

// A connection attempt that did not reach the server (refused, timed out, broken) counts as
// unreachable; one that a live server refused (too many connections, a failed authentication,
// no such database) or that failed in the client is an error of its own: a run that meets it
// on every operation is not told the database is down, and goes on.
func TestUnreachableConnect(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cause error
		want  bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ENETUNREACH}, true},
		{&net.DNSError{Err: "no such host", Name: "db.invalid", IsNotFound: true}, true},
		{context.DeadlineExceeded, true}, // connect_timeout: the server never answered
		{io.EOF, true},                   // closed before it answered
		{&pgconn.PgError{Code: "57P03", Message: "the database system is shutting down"}, true},
		{&pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"}, false},
		{&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}, false},
		{&pgconn.PgError{Code: "3D000", Message: "database does not exist"}, false},
		{errors.New("failed SASL auth: invalid server signature"), false},
		{context.Canceled, false},
	} {
		err := connectError(t, c.cause)
		var connErr *pgconn.ConnectError
		if !errors.As(err, &connErr) {
			t.Fatalf("connect with dial failing with %v: %v, want a *pgconn.ConnectError", c.cause, err)
		}
		if got := unreachable(err); got != c.want {
			t.Errorf("unreachable(%v) = %v, want %v", err, got, c.want)
		}
	}
}

// The same against real servers: one that is stopped is unreachable, one that answers that the
// database does not exist is not.
func TestUnreachableConnectToRealServers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stopped, err := deadserver.Stop()
	if err != nil {
		t.Fatal(err)
	}
	defer stopped.Close()
	if _, err := pgconn.Connect(ctx, "postgres://nobody@"+stopped.Addr()+"/none?sslmode=disable&connect_timeout=5"); !unreachable(err) {
		t.Errorf("unreachable(%v) = false for a stopped server, want true", err)
	}
	cfg, err := pgconn.ParseConfig(pgtest.NewEmptyURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "pgadmit_no_such_database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err == nil {
		conn.Close(ctx)
		t.Fatal("connected to a database that does not exist")
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" {
		t.Fatalf("connect to a database that does not exist: %v, want SQLSTATE 3D000", err)
	}
	if unreachable(err) {
		t.Errorf("unreachable(%v) = true for a live server's refusal, want false", err)
	}
}
