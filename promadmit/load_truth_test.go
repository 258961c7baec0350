package promadmit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/deadserver"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// loadInstance is one gateway instance of TestMetricsMatchTruthUnderLoad:
// its own pool, Limiter, registry, and nested middlewares (one for every
// route outside, one per user inside), with what its handlers saw.
type loadInstance struct {
	reg    *prometheus.Registry
	server *httptest.Server

	sent       atomic.Int64 // requests the outer middleware decided
	served     atomic.Int64 // inner handler ran with a grant
	failedOpen atomic.Int64 // inner handler ran without one
	refused    atomic.Int64 // inner refusal handler ran
	closed     atomic.Int64 // inner error handler ran: failed closed
	byKind     sync.Map     // kind -> *atomic.Int64, of served requests

	startedMu sync.Mutex
	started   map[string]chan struct{}
}

func (in *loadInstance) countKind(kind string) {
	c, _ := in.byKind.LoadOrStore(kind, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

func (in *loadInstance) kind(kind string) int64 {
	c, ok := in.byKind.Load(kind)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

const (
	loadUsers     = 5
	loadUserQuota = 10
	loadShadow    = 20
	loadDiscard   = "upstream_failed"
)

// Several gateway instances on one database (and one whose database
// hangs), each with nested middlewares, serve a mix of admitted, refused,
// shadow-refused, failed-open, discarded, panicking and disconnecting
// requests concurrently. What each instance's /metrics says must be what
// its handlers saw and what the database holds.
func TestMetricsMatchTruthUnderLoad(t *testing.T) {
	t.Parallel()
	pools := pgtest.NewPools(t, 3)
	hang, err := deadserver.Hang()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hang.Close)
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", hang.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	hung, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hung.Close)

	run := fmt.Sprintf("%d", time.Now().UnixNano())
	userKey := func(u int) string { return fmt.Sprintf("u%d-%s", u, run) }
	outerLimits := func(*http.Request) ([]httpadmit.Limit, error) {
		return []httpadmit.Limit{
			{OnFailure: httpadmit.FailOpen, Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "route", Key: run},
				Metric: ratelimit.MetricRequests, Limit: 1e9, Amount: 1, Window: time.Hour}},
			{OnFailure: httpadmit.FailOpen, Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "route", Key: run},
				Metric: ratelimit.MetricConcurrent, Limit: 1e6, Amount: 1}},
		}, nil
	}
	innerLimits := func(r *http.Request) ([]httpadmit.Limit, error) {
		u, err := strconv.Atoi(r.Header.Get("X-User"))
		if err != nil {
			return nil, fmt.Errorf("%w: X-User", httpadmit.ErrBadRequest)
		}
		onFailure := httpadmit.FailOpen
		if u == 0 {
			onFailure = httpadmit.FailClosed
		}
		return []httpadmit.Limit{
			{OnFailure: onFailure, Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "user", Key: userKey(u)},
				Metric: ratelimit.MetricRequests, Limit: loadUserQuota, Amount: 1, Window: time.Hour}},
			{Mode: httpadmit.Shadow, OnFailure: httpadmit.FailOpen, Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "shadow", Key: run},
				Metric: ratelimit.MetricRequests, Limit: loadShadow, Amount: 1, Window: time.Hour}},
		}, nil
	}

	var instances []*loadInstance
	localKey := run + "-local"
	localLimits := func(*http.Request) ([]httpadmit.Limit, error) {
		l := httpadmit.Limit{OnFailure: httpadmit.FailOpen, Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "route", Key: localKey},
			Metric: ratelimit.MetricRequests, Limit: 1e6, Amount: 1, Window: time.Hour}}
		l.Local = true
		return []httpadmit.Limit{l}, nil
	}
	newInstance := func(pool *pgxpool.Pool, decision time.Duration, outerLimits httpadmit.LimitsFunc, lopts ...ratelimit.Option) *loadInstance {
		in := &loadInstance{reg: prometheus.NewRegistry(), started: map[string]chan struct{}{}}
		limiter := ratelimit.New(pool, lopts...)
		t.Cleanup(limiter.Close)
		metrics, err := promadmit.New(in.reg)
		if err != nil {
			t.Fatal(err)
		}
		registerCombining(t, in.reg, limiter)
		opts := []httpadmit.Option{httpadmit.WithObserver(metrics), httpadmit.WithDecisionTimeout(decision),
			httpadmit.WithSettleTimeout(10 * time.Second), httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
		outer, err := httpadmit.New(limiter, outerLimits, opts...)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := httpadmit.New(limiter, innerLimits, append(opts, httpadmit.WithErrorHandler(
			func(w http.ResponseWriter, r *http.Request, err error) {
				if errors.Is(err, httpadmit.ErrUnavailable) {
					in.closed.Add(1)
				}
				httpadmit.DefaultErrorHandler(w, r, err)
			}), httpadmit.WithRefusalHandler(
			func(w http.ResponseWriter, r *http.Request, refusal *httpadmit.Refusal) {
				in.refused.Add(1)
				httpadmit.DefaultRefusalHandler(w, r, refusal)
			}))...)
		if err != nil {
			t.Fatal(err)
		}
		countOuter := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				in.sent.Add(1)
				next.ServeHTTP(w, r)
			})
		}
		app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			grant, _ := httpadmit.GrantFrom(r.Context())
			if grant.Empty() {
				in.failedOpen.Add(1)
			} else {
				in.served.Add(1)
				in.countKind(r.Header.Get("X-Kind"))
			}
			switch r.Header.Get("X-Kind") {
			case "discard":
				if err := httpadmit.Discard(r.Context(), loadDiscard); err != nil {
					t.Error(err)
				}
				w.WriteHeader(http.StatusBadGateway)
			case "panic":
				panic(http.ErrAbortHandler)
			case "disconnect":
				in.startedMu.Lock()
				close(in.started[r.Header.Get("X-ID")])
				in.startedMu.Unlock()
				<-r.Context().Done()
			default:
				_, _ = io.WriteString(w, "ok")
			}
		})
		in.server = httptest.NewServer(countOuter(outer(inner(app))))
		t.Cleanup(in.server.Close)
		instances = append(instances, in)
		return in
	}
	for _, p := range pools[:2] {
		newInstance(p, 10*time.Second, outerLimits)
	}
	local := newInstance(pools[2], 10*time.Second, localLimits, ratelimit.WithAllotments(ratelimit.AllotmentOptions{}))
	broken := newInstance(hung, 30*time.Millisecond, outerLimits)

	kinds := []string{"ok", "ok", "ok", "discard", "panic", "disconnect"}
	const workers, perWorker = 6, 6
	var wg sync.WaitGroup
	for i, in := range instances {
		client := in.server.Client()
		for w := range workers {
			wg.Go(func() {
				for j := range perWorker {
					if in == broken && j >= 2 {
						return // each costs about the decision timeout twice
					}
					n := (i*workers+w)*perWorker + j
					id := strconv.Itoa(n)
					kind := kinds[(w+j)%len(kinds)]
					ctx, cancel := context.WithCancel(context.Background())
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.server.URL, nil)
					if err != nil {
						t.Error(err)
						cancel()
						return
					}
					req.Header.Set("X-User", strconv.Itoa(n%loadUsers))
					req.Header.Set("X-Kind", kind)
					req.Header.Set("X-ID", id)
					started := make(chan struct{})
					in.startedMu.Lock()
					in.started[id] = started
					in.startedMu.Unlock()
					done := make(chan struct{})
					go func() {
						select {
						case <-started:
							cancel()
						case <-done:
						}
					}()
					resp, err := client.Do(req)
					close(done)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					}
					cancel()
				}
			})
		}
	}
	wg.Wait()
	// The last settles run after the responses went out (a disconnected
	// client, a panic): every instance's server is closed, which waits for
	// its handlers, before the metrics are read.
	for _, in := range instances {
		in.server.Close()
	}

	ctx := context.Background()
	q := dbtest.New()
	reasons := map[[3]string]int64{} // scope type, status, reason -> reservations (the route's of the instances without Local limits)
	byScope := map[string]map[string]int64{}
	keys := map[string][]string{"route": {run, localKey}, "shadow": {run}}
	for u := range loadUsers {
		keys["user"] = append(keys["user"], userKey(u))
	}
	for scopeType, ks := range keys {
		byScope[scopeType] = map[string]int64{}
		for _, k := range ks {
			rows, err := q.ReservationsByReason(ctx, pools[0], dbtest.ReservationsByReasonParams{ScopeType: scopeType, ScopeKey: k})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				byScope[scopeType][r.Status] += r.Reservations
				if k != localKey {
					reasons[[3]string{scopeType, r.Status, r.Reason}] += r.Reservations
				}
			}
		}
	}
	live, err := q.LeaseLiveByScope(ctx, pools[0], dbtest.LeaseLiveByScopeParams{ScopeType: "route", ScopeKey: run})
	if err != nil {
		t.Fatal(err)
	}
	if live.Leases != 0 {
		t.Errorf("%d leases still live", live.Leases)
	}
	if byScope["route"]["reserved"]+byScope["user"]["reserved"]+byScope["shadow"]["reserved"] != 0 {
		t.Errorf("reservations left open: %v", byScope)
	}

	var commits, releases, shadowAdmitted, served, refused int64
	for i, in := range instances {
		v := seriesValues(t, in.reg)
		check := func(series string, want int64) {
			t.Helper()
			if got := v[series]; got != float64(want) {
				t.Errorf("instance %d: %s = %g, handlers saw %d", i, series, got, want)
			}
		}
		sent, srv, fo, ref, closed := in.sent.Load(), in.served.Load(), in.failedOpen.Load(), in.refused.Load(), in.closed.Load()
		check("pgadmit_http_leases_held", 0)
		// Nothing lost: every statement of a live database was answered, and the hung one
		// never took a connection, so nothing was sent to it.
		check("pgadmit_lost_total", 0)
		check("pgadmit_give_backs_dropped_total", 0)
		check("pgadmit_give_backs_failed_total", 0)
		// Every call returned: none waits in a combiner.
		check("pgadmit_combined_waiting/"+promadmit.KindReserve, 0)
		check("pgadmit_combined_waiting/"+promadmit.KindSettle, 0)
		// Only the local instance takes blocks, and none of its block
		// statements fails (Close returns them later, unseen here).
		check("pgadmit_local_statement_failures_total", 0)
		check("pgadmit_local_blocks_abandoned_total", 0)
		if in != local {
			check("pgadmit_local_blocks_granted_total", 0)
			check("pgadmit_local_limits_total/"+promadmit.DecidedByBlock, 0)
			check("pgadmit_local_limits_total/"+promadmit.DecidedInDatabase, 0)
		} else if v["pgadmit_local_blocks_granted_total"] < 1 {
			t.Errorf("instance %d: pgadmit_local_blocks_granted_total = %g, want the blocks of its Local limit", i, v["pgadmit_local_blocks_granted_total"])
		}
		if in == broken {
			if srv != 0 || ref != 0 || closed == 0 || fo+closed != sent {
				t.Fatalf("broken instance: %d sent, %d served, %d refused, %d failed open, %d failed closed", sent, srv, ref, fo, closed)
			}
			for _, s := range []string{"requests/enforce/failed_open/route", "concurrent/enforce/failed_open/route"} {
				check("pgadmit_http_admissions_total/"+s, sent)
			}
			check("pgadmit_http_admissions_total/requests/enforce/failed_open/user", fo)
			check("pgadmit_http_admissions_total/requests/enforce/failed_closed/user", closed)
			check("pgadmit_http_admissions_total/requests/shadow/failed_open/shadow", fo)
			check("pgadmit_db_operation_duration_seconds/reserve/timeout", 2*sent)
			// Each request decided twice, outside (failed open) and inside.
			checkRequests(t, i, v, 0, 0, sent+fo, closed)
			checkSeries(t, i, v, expectedBrokenSeries)
			continue
		}
		if fo != 0 || closed != 0 {
			t.Fatalf("instance %d failed open %d times, closed %d", i, fo, closed)
		}
		shadowRefused := int64(v["pgadmit_http_admissions_total/requests/shadow/shadow_refused/shadow"])
		shadowAdmitted += int64(v["pgadmit_http_admissions_total/requests/shadow/admitted/shadow"])
		check("pgadmit_http_admissions_total/requests/enforce/admitted/route", sent)
		if in != local {
			check("pgadmit_http_admissions_total/concurrent/enforce/admitted/route", sent)
		}
		check("pgadmit_http_admissions_total/requests/enforce/admitted/user", srv)
		check("pgadmit_http_admissions_total/requests/enforce/refused/user", ref)
		// Each request decided twice: admitted outside, then admitted or refused inside.
		checkRequests(t, i, v, sent+srv, ref, 0, 0)
		if srv+ref != sent {
			t.Errorf("instance %d: %d served and %d refused of %d sent", i, srv, ref, sent)
		}
		// Each request: one Reserve outside, one inside that admits or
		// refuses, and one more per shadow refusal.
		// (Outside, a request admitted from a local block makes no call.)
		ok := int64(v["pgadmit_db_operation_duration_seconds/reserve/ok"])
		if in != local {
			check("pgadmit_db_operation_duration_seconds/reserve/ok", sent+srv)
		} else if ok < srv || ok >= sent+srv {
			t.Errorf("instance %d: %d reserves admitted, want from %d to %d: some from local blocks", i, ok, srv, sent+srv-1)
		} else {
			// Its outside Local limit, of every request, decided once: in the
			// database, admitted (its limit is never reached), or from a block.
			check("pgadmit_local_limits_total/"+promadmit.DecidedInDatabase, ok-srv)
			check("pgadmit_local_limits_total/"+promadmit.DecidedByBlock, sent-(ok-srv))
		}
		check("pgadmit_db_operation_duration_seconds/reserve/exceeded", ref+shadowRefused)
		check("pgadmit_combined_calls_total/reserve", ok+ref+shadowRefused)
		// Every grant is settled once: the outer one of each request, the
		// inner one of each served request.
		c := int64(v["pgadmit_db_operation_duration_seconds/commit/ok"])
		r := int64(v["pgadmit_db_operation_duration_seconds/release/ok"])
		if in != local && c+r != sent+srv {
			t.Errorf("instance %d: %d commits and %d releases for %d grants", i, c, r, sent+srv)
		}
		check("pgadmit_combined_calls_total/settle", c+r)
		commits, releases, served, refused = commits+c, releases+r, served+srv, refused+ref
		checkSeries(t, i, v, expectedSeries)
	}
	if got := byScope["route"]["committed"] + byScope["user"]["committed"]; got != commits {
		t.Errorf("%d commits observed, %d reservations committed", commits, got)
	}
	if got := byScope["route"]["released"] + byScope["user"]["released"]; got != releases {
		t.Errorf("%d releases observed, %d reservations released", releases, got)
	}
	if got := byScope["shadow"]["committed"] + byScope["shadow"]["released"]; got != shadowAdmitted {
		t.Errorf("%d shadow admissions observed, %d shadow reservations", shadowAdmitted, got)
	}
	var discards, panics, disconnects int64
	route := map[string]int64{}
	for _, in := range instances[:len(pools)] {
		discards, panics, disconnects = discards+in.kind("discard"), panics+in.kind("panic"), disconnects+in.kind("disconnect")
		if in != local {
			route[loadDiscard] += in.kind("discard")
			route[httpadmit.ReasonHandlerPanic] += in.kind("panic")
			route[httpadmit.ReasonClientDisconnected] += in.kind("disconnect")
			route[httpadmit.ReasonRefusedInside] += in.refused.Load()
		}
	}
	for reason, n := range map[string]int64{loadDiscard: discards, httpadmit.ReasonHandlerPanic: panics,
		httpadmit.ReasonClientDisconnected: disconnects} {
		if got := reasons[[3]string{"user", "released", reason}]; got != n {
			t.Errorf("user: released %q: %d reservations, handlers saw %d", reason, got, n)
		}
	}
	for reason, n := range route {
		if got := reasons[[3]string{"route", "released", reason}]; got != n {
			t.Errorf("route: released %q: %d reservations, handlers saw %d", reason, got, n)
		}
	}
	if refused == 0 || served == 0 || discards == 0 || panics == 0 || disconnects == 0 {
		t.Errorf("the load lacks a kind: %d served, %d refused, %d discards, %d panics, %d disconnects",
			served, refused, discards, panics, disconnects)
	}
	if t.Failed() {
		t.Logf("database: %v; reasons %v", byScope, reasons)
		for i, in := range instances {
			t.Logf("instance %d: %v", i, seriesValues(t, in.reg))
		}
	}
}

// checkSeries checks that instance's series v are those expected, the
// counters New creates at 0 aside: pgadmit_db_operations_total counts what
// the histogram of its operation and result does (0 for one it lacks).
func checkSeries(t *testing.T, instance int, v map[string]float64, expected map[string]bool) {
	t.Helper()
	for series, value := range v {
		if call, ok := strings.CutPrefix(series, "pgadmit_db_operations_total/"); ok {
			if want := v["pgadmit_db_operation_duration_seconds/"+call]; value != want {
				t.Errorf("instance %d: %s = %g, its histogram counts %g", instance, series, value, want)
			}
			continue
		}
		if !expected[series] && !idleMaintenanceSeries(series, value) {
			t.Errorf("instance %d: unexpected series %s = %g", instance, series, value)
		}
	}
}

// checkRequests checks pgadmit_http_requests_total: what the handlers saw
// the middlewares decide, a request once per middleware.
func checkRequests(t *testing.T, instance int, v map[string]float64, admitted, refused, failedOpen, failedClosed int64) {
	t.Helper()
	for outcome, want := range map[httpadmit.Outcome]int64{httpadmit.OutcomeAdmitted: admitted, httpadmit.OutcomeRefused: refused,
		httpadmit.OutcomeFailedOpen: failedOpen, httpadmit.OutcomeFailedClosed: failedClosed} {
		if got := v["pgadmit_http_requests_total/"+string(outcome)]; got != float64(want) {
			t.Errorf("instance %d: pgadmit_http_requests_total/%s = %g, handlers saw %d", instance, outcome, got, want)
		}
	}
}

// The series an instance on a working database may have.
// idleMaintenanceSeries reports whether series is one of the Recover and
// Prune counters, which New creates at 0, still at 0: no instance runs
// maintenance here.
func idleMaintenanceSeries(series string, value float64) bool {
	return value == 0 && (strings.HasPrefix(series, "pgadmit_recovered_total/") || strings.HasPrefix(series, "pgadmit_pruned_total/"))
}

var expectedSeries = func() map[string]bool {
	m := map[string]bool{"pgadmit_http_leases_held": true, "pgadmit_lost_total": true, buildInfoSeries: true}
	m["pgadmit_http_near_limit_total/requests/user"] = true
	for _, s := range []string{ // metric, mode, outcome, scope type: the labels in order
		"requests/enforce/admitted/route", "concurrent/enforce/admitted/route",
		"requests/enforce/admitted/user", "requests/enforce/refused/user",
		"requests/shadow/admitted/shadow", "requests/shadow/shadow_refused/shadow",
	} {
		m["pgadmit_http_admissions_total/"+s] = true
	}
	for _, s := range []string{"reserve/ok", "reserve/exceeded", "commit/ok", "release/ok"} {
		m["pgadmit_db_operation_duration_seconds/"+s] = true
	}
	addRequestSeries(m)
	addCombiningSeries(m)
	return m
}()

// The series an instance whose database hangs may have.
var expectedBrokenSeries = func() map[string]bool {
	m := map[string]bool{"pgadmit_http_leases_held": true, "pgadmit_lost_total": true, buildInfoSeries: true,
		"pgadmit_db_operation_duration_seconds/reserve/timeout": true}
	for _, s := range []string{"requests/enforce/failed_open/route", "concurrent/enforce/failed_open/route",
		"requests/enforce/failed_open/user", "requests/enforce/failed_closed/user", "requests/shadow/failed_open/shadow"} {
		m["pgadmit_http_admissions_total/"+s] = true
	}
	addRequestSeries(m)
	addCombiningSeries(m)
	return m
}()

// buildInfoSeries is New's pgadmit_build_info, labelled (goversion,
// version) as a test binary built in this tree is.
var buildInfoSeries = "pgadmit_build_info/" + runtime.Version() + "/(devel)"

// addRequestSeries adds the series of pgadmit_http_requests_total, which
// New makes at 0 and checkRequests checks, to m.
func addRequestSeries(m map[string]bool) {
	for _, o := range []httpadmit.Outcome{httpadmit.OutcomeAdmitted, httpadmit.OutcomeRefused, httpadmit.OutcomeFailedOpen, httpadmit.OutcomeFailedClosed} {
		m["pgadmit_http_requests_total/"+string(o)] = true
	}
}

// addCombiningSeries adds the series of NewCombiningCollector to m.
func addCombiningSeries(m map[string]bool) {
	for _, name := range []string{"statements", "calls", "hot_statements", "statement_seconds"} {
		for _, kind := range []string{promadmit.KindReserve, promadmit.KindSettle} {
			m["pgadmit_combined_"+name+"_total/"+kind] = true
		}
	}
	for _, kind := range []string{promadmit.KindReserve, promadmit.KindSettle} {
		m["pgadmit_combined_waiting/"+kind] = true
	}
	m["pgadmit_give_backs_dropped_total"], m["pgadmit_give_backs_failed_total"], m["pgadmit_give_backs_waiting"] = true, true, true
	for _, name := range []string{"blocks_granted", "blocks_no_room", "statement_failures", "blocks_abandoned"} {
		m["pgadmit_local_"+name+"_total"] = true
	}
	for _, decided := range []string{promadmit.DecidedByBlock, promadmit.DecidedInDatabase} {
		m["pgadmit_local_limits_total/"+decided] = true
	}
}

// seriesValues is counterValues with the gauges too (gaugeValues).
func seriesValues(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := counterValues(families)
	maps.Copy(out, gaugeValues(families))
	return out
}
