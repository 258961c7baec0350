package servertime_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/internal/servertime"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestNotLoaded runs on a server without the library in shared_preload_libraries (pgtest's
// throwaway cluster never preloads it; the DATABASE_URL server usually does not).
func TestNotLoaded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	p, err := db.New().BenchStatementStatsProbe(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if p.Loaded {
		t.Skip("this server preloads pg_stat_statements")
	}
	st, err := servertime.Prepare(ctx, pool)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if st.Available || st.Reason != servertime.ReasonNotLoaded || st.SessionSettings() != nil {
		t.Errorf("Prepare without the library: %+v", st)
	}
	if p, err := db.New().BenchStatementStatsProbe(ctx, pool); err != nil || p.CreatedVersion != "" {
		t.Errorf("Prepare without the library created the extension (%q) or failed: %v", p.CreatedVersion, err)
	}
}

// TestWhereServerTimeGoes runs admissions on a cluster that preloads pg_stat_statements and
// finds them, and the statements of the functions they call, in the report.
func TestWhereServerTimeGoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Preload("pg_stat_statements"))
	if errors.Is(err, pgcluster.ErrNoPostgres) && os.Getenv("DATABASE_URL") != "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if !slices.Contains(c.Preloaded(), "pg_stat_statements") {
		t.Skip("this PostgreSQL installation has no pg_stat_statements")
	}
	admin, err := pgxpool.New(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	conn, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	st, err := servertime.Prepare(ctx, conn)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if !st.Available || !st.Created || !st.CanTrack || st.Version == "" {
		t.Fatalf("Prepare on a preloading cluster, as a superuser: %+v", st)
	}
	if track, planning := st.Tracking(); track != "all" || planning != "on" {
		t.Errorf("Tracking() = %s, %s; want all, on", track, planning)
	}
	if again, err := servertime.Prepare(ctx, conn); err != nil || !again.Available || again.Created {
		t.Errorf("second Prepare: %+v, %v", again, err)
	}

	cfg, err := pgxpool.ParseConfig(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range st.SessionSettings() {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	before, err := servertime.Take(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	lim := ratelimit.New(pool, ratelimit.WithoutCombining())
	limit := []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: "k"}, Metric: ratelimit.MetricRequests, Limit: 1e6, Amount: 1, Window: time.Minute}}
	const n = 20
	for range n {
		g, err := lim.Reserve(ctx, "", "", limit)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lim.Commit(ctx, g, nil); err != nil {
			t.Fatal(err)
		}
	}
	after, err := servertime.Take(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	got := after.Since(before)
	funcs, err := servertime.Functions(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	servertime.Attribute(got, funcs)

	var top, nested *servertime.Statement
	for i, s := range got {
		t.Logf("%-5v %4d calls %3d plans %8.1f µs plan %8.1f µs exec  %-20s %s", s.TopLevel, s.Calls, s.Plans, s.MeanPlanUs, s.MeanExecUs, s.Function, s.Name)
		if s.Name == "BenchStatementStats" {
			t.Errorf("the snapshot's own statement is in the report")
		}
		switch {
		case s.TopLevel && s.Function == "pgadmit_reserve_one" && top == nil:
			top = &got[i]
		case !s.TopLevel && s.Function == "pgadmit_reserve_one" && nested == nil:
			nested = &got[i]
		}
	}
	if top == nil || top.Calls != n || top.Name == "" || top.MeanExecUs <= 0 {
		t.Errorf("no top-level statement calling pgadmit_reserve_one %d times: %+v", n, top)
	}
	if nested == nil || nested.Calls < n || nested.Plans >= nested.Calls {
		t.Errorf("no statement nested in pgadmit_reserve_one run %d times with its plan cached: %+v", n, nested)
	}
	if top != nil && nested != nil && top.TotalMs() < nested.TotalMs() {
		t.Errorf("the call (%.3f ms) took less than a statement nested in it (%.3f ms)", top.TotalMs(), nested.TotalMs())
	}
}
