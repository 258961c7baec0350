package servertime_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/peterldowns/pgtestdb"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgbouncer"
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

// TestPreloaded runs on a cluster that preloads pg_stat_statements: as a superuser, which
// creates the extension and tracks everything, and as a role that may do neither.
func TestPreloaded(t *testing.T) {
	t.Parallel()
	c := pgtest.OwnCluster(t, pgcluster.Preload("pg_stat_statements"))
	if !slices.Contains(c.Preloaded(), "pg_stat_statements") {
		t.Skip("this PostgreSQL installation has no pg_stat_statements")
	}
	t.Run("superuser", func(t *testing.T) { testWhereServerTimeGoes(t, c) })
	t.Run("role", func(t *testing.T) { testRole(t, c) })
	t.Run("behind PgBouncer", func(t *testing.T) { testBehindPgBouncer(t, c) })
}

// testBehindPgBouncer runs Prepare through a PgBouncer in transaction pooling mode with one
// server connection: another client, which gets that same server session, must still see the
// server's tracking settings. (Prepare used to switch tracking off with a session-level
// set_config, which stayed on the pooler's server connection for whichever client came next.)
func testBehindPgBouncer(t *testing.T, c *pgcluster.Cluster) {
	ctx := context.Background()
	b, err := pgbouncer.Start(ctx, pgbouncer.Config{ServerHost: pgcluster.Host, ServerPort: c.Port(),
		Users: map[string]string{pgcluster.User: ""}, PoolMode: "transaction", PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable&default_query_exec_mode=exec",
		pgcluster.User, pgbouncer.Host, b.Port(), pgcluster.Database)
	measurer, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer measurer.Close(ctx)
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)

	q := db.New()
	var want [2]string
	for i, name := range []string{"pg_stat_statements.track", "pg_stat_statements.track_planning"} {
		if want[i], err = q.BenchServerSetting(ctx, other, name); err != nil {
			t.Fatal(err)
		}
	}
	st, err := servertime.Prepare(ctx, measurer)
	if err != nil || !st.Available || !st.CanTrack {
		t.Fatalf("Prepare through PgBouncer: %+v, %v", st, err)
	}
	for i, name := range []string{"pg_stat_statements.track", "pg_stat_statements.track_planning"} {
		got, err := q.BenchServerSetting(ctx, other, name)
		if err != nil {
			t.Fatal(err)
		}
		if got != want[i] {
			t.Errorf("after Prepare on another client of the pooler, %s = %q on this client's session, want the server's %q", name, got, want[i])
		}
	}
	// The snapshots still work, and still leave themselves out.
	before, err := servertime.Take(ctx, measurer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.BenchServerSetting(ctx, other, "server_version"); err != nil {
		t.Fatal(err)
	}
	after, err := servertime.Take(ctx, measurer)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range after.Since(before) {
		if strings.HasPrefix(st.Name, "BenchStatement") {
			t.Errorf("Since counts a statement of the measurement itself: %+v", st)
		}
	}
}

// testWhereServerTimeGoes runs admissions as a superuser and finds them, and the statements
// of the functions they call, in the report.
func testWhereServerTimeGoes(t *testing.T, c *pgcluster.Cluster) {
	ctx := context.Background()
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

// testRole prepares pg_stat_statements as a role that is no superuser: it cannot
// create the extension, and once a superuser did, it reads its own statements' statistics but
// cannot ask for nested ones.
func testRole(t *testing.T, c *pgcluster.Cluster) {
	ctx := context.Background()
	// A role of its own: pgtestdb creates each role once per process, whatever the server, and
	// pgtest's role lives on another server.
	conf := pgtestdb.Custom(t, pgtestdb.Config{DriverName: "pgx", Host: pgcluster.Host, Port: strconv.Itoa(c.Port()),
		User: pgcluster.User, Database: pgcluster.Database, Options: "sslmode=disable",
		TestRole: &pgtestdb.Role{Username: "pgadmit_servertime", Password: "servertime", Capabilities: "NOSUPERUSER NOCREATEDB NOCREATEROLE"},
	}, pgtestdb.NoopMigrator{})
	role, err := pgx.Connect(ctx, conf.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer role.Close(ctx)
	st, err := servertime.Prepare(ctx, role)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if st.Available || !strings.Contains(st.Reason, "the pg_stat_statements extension could not be created: permission denied") {
		t.Errorf("Prepare as a role that may not create the extension: %+v", st)
	}

	superURL := strings.Replace(conf.URL(), conf.User+":"+conf.Password+"@", pgcluster.User+"@", 1)
	super, err := pgx.Connect(ctx, superURL)
	if err != nil {
		t.Fatal(err)
	}
	defer super.Close(ctx)
	if st, err := servertime.Prepare(ctx, super); err != nil || !st.Created {
		t.Fatalf("Prepare as a superuser in %s: %+v, %v", superURL, st, err)
	}

	st, err = servertime.Prepare(ctx, role)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if !st.Available || st.CanTrack || st.SessionSettings() != nil {
		t.Errorf("Prepare as a role, the extension created: %+v", st)
	}
	if track, planning := st.Tracking(); track != "top" || planning != "off" {
		t.Errorf("Tracking() = %s, %s; want the server's top, off", track, planning)
	}
	before, err := servertime.Take(ctx, role)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.New().BenchServerSetting(ctx, role, "server_version"); err != nil {
		t.Fatal(err)
	}
	after, err := servertime.Take(ctx, role)
	if err != nil {
		t.Fatal(err)
	}
	got := after.Since(before)
	if len(got) != 1 || got[0].Name != "BenchServerSetting" || got[0].Calls != 1 || !got[0].TopLevel {
		t.Errorf("Since, as a role (its own snapshot left out): %+v", got)
	}
}
