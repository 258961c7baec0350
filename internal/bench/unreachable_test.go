package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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
