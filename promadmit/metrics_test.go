package promadmit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func limit(scopeType, key, metric string, quota, amount float64, mode httpadmit.Mode) httpadmit.Limit {
	return httpadmit.Limit{Mode: mode, Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: scopeType, Key: key},
		Metric: metric, Limit: quota, Amount: amount, Window: ratelimit.MaxWindow}}
}

// A gateway with metrics on a real registry, scraped over HTTP after
// admissions, a refusal, shadow refusals, a Recover and a Prune.
func TestMetricsScrapedAfterTraffic(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool)
	reg, metrics := newRegistered(t)
	mw, err := httpadmit.New(limiter, func(r *http.Request) ([]httpadmit.Limit, error) {
		key := r.Header.Get("Authorization")
		return []httpadmit.Limit{
			limit("api_key", key, ratelimit.MetricRequests, 5, 1, httpadmit.Enforce),
			limit("team", "team-"+key, ratelimit.MetricRequests, 2, 1, httpadmit.Shadow),
			{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "model", Key: "m-" + key}, Metric: ratelimit.MetricConcurrent, Limit: 3, Amount: 1}},
		}, nil
	}, httpadmit.WithObserver(metrics), httpadmit.WithDecisionTimeout(10*time.Second),
		httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if page := scrape(t, reg); !strings.Contains(page, "\npgadmit_http_leases_held 1\n") {
			t.Errorf("pgadmit_http_leases_held while a request runs is not 1")
		}
	})))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	secret := "sk-secret-" + fmt.Sprint(time.Now().UnixNano())
	codes := map[int]int{}
	for range 6 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat", nil)
		req.Header.Set("Authorization", secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] != 5 || codes[429] != 1 {
		t.Fatalf("codes %v, want 5 x 200 and 1 x 429", codes)
	}
	ctx := context.Background()
	maint := ratelimit.NewMaintenance(pool)
	if _, err := metrics.Recover(ctx, maint); err != nil {
		t.Fatal(err)
	}
	if _, err := metrics.Prune(ctx, maint, time.Hour); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	for _, want := range []string{
		`pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="admitted",scope_type="api_key"} 5`,
		`pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="refused",scope_type="api_key"} 1`,
		`pgadmit_http_admissions_total{metric="requests",mode="shadow",outcome="admitted",scope_type="team"} 2`,
		`pgadmit_http_admissions_total{metric="requests",mode="shadow",outcome="shadow_refused",scope_type="team"} 3`,
		`pgadmit_http_admissions_total{metric="concurrent",mode="enforce",outcome="admitted",scope_type="model"} 5`,
		// The fourth request left the limit 80% used, the fifth full.
		`pgadmit_http_near_limit_total{metric="requests",scope_type="api_key"} 2`,
		`pgadmit_http_leases_held 0`,
		`pgadmit_db_operation_duration_seconds_count{operation="reserve",result="ok"} 5`,       // one per admitted request
		`pgadmit_db_operation_duration_seconds_count{operation="reserve",result="exceeded"} 4`, // 3 shadow refusals and the 429
		`pgadmit_db_operation_duration_seconds_count{operation="commit",result="ok"} 5`,
		`pgadmit_db_operation_duration_seconds_count{operation="recover",result="ok"} 1`,
		`pgadmit_db_operation_duration_seconds_count{operation="prune",result="ok"} 1`,
		`pgadmit_recovered_total{kind="leases"} 0`,
		`pgadmit_pruned_total{kind="counters"} 0`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(page, secret) {
		t.Errorf("/metrics shows a scope key")
	}
	if !regexp.MustCompile(`(?m)^# TYPE pgadmit_db_operation_duration_seconds histogram$`).MatchString(page) {
		t.Errorf("/metrics has no latency histogram:\n%s", page)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", page)
	}
}

// newRegistered is a Metrics made with opts and registered on a registry
// of its own.
func newRegistered(t *testing.T, opts ...promadmit.Option) (*prometheus.Registry, *promadmit.Metrics) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := promadmit.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// registerCombining registers limiter's combining collector in reg.
func registerCombining(t *testing.T, reg prometheus.Registerer, limiter *ratelimit.Limiter) {
	t.Helper()
	collector, err := promadmit.NewCombiningCollector(limiter)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(collector)
}

// registerPool registers a pool collector of pool on reg.
func registerPool(t *testing.T, reg prometheus.Registerer, pool *pgxpool.Pool) {
	t.Helper()
	collector, err := promadmit.NewPoolCollector(pool)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(collector)
}

// scrape renders reg's metrics as /metrics would.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// Pairs of scope type and metric beyond the cap share the label "other".
func TestLabelsAreBounded(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t, promadmit.WithMaxSeries(2))
	for i := range 5 {
		m.Decided([]httpadmit.LimitOutcome{{Limit: limit(fmt.Sprintf("type-%d", i), "k", "requests", 1, 1, httpadmit.Enforce), Outcome: httpadmit.OutcomeAdmitted}})
	}
	if got := testutil.CollectAndCount(reg, "pgadmit_http_admissions_total"); got != 3 {
		t.Errorf("%d series, want 3 (two types and other)", got)
	}
	other := `
# HELP pgadmit_http_leases_held Concurrency leases held by HTTP requests in flight in this process.
# TYPE pgadmit_http_leases_held gauge
pgadmit_http_leases_held 2
`
	m.LeasesHeld(3)
	m.LeasesHeld(-1)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(other), "pgadmit_http_leases_held"); err != nil {
		t.Error(err)
	}
}

// New registers all its metrics or none: one that fails to register (its
// name is taken) leaves nothing behind, so that New can be called again on
// the registry.
func TestNewRegistersAllOrNothing(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	// The squatter holds the last of New's metrics, as another Metrics
	// would (a registry never forgets a name's help and labels).
	other, err := promadmit.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	descs := make(chan *prometheus.Desc, 16)
	other.Describe(descs)
	close(descs)
	squatter := descOnly{}
	for d := range descs {
		if strings.Contains(d.String(), `"pgadmit_pruned_total"`) {
			squatter.desc = d
		}
	}
	reg.MustRegister(squatter)
	if _, err := promadmit.New(reg); err == nil {
		t.Fatal("New succeeded although a registration failed")
	}
	reg.Unregister(squatter)
	if _, err := promadmit.New(reg); err != nil {
		t.Fatalf("New again: %v", err)
	}
}

// descOnly is a collector of one descriptor and no metrics.
type descOnly struct{ desc *prometheus.Desc }

func (c descOnly) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c descOnly) Collect(chan<- prometheus.Metric)    {}

// Results of operations: timeouts, errors, skipped recoveries.
func TestOperationResults(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t)
	m.DatabaseCall(httpadmit.OpReserve, time.Millisecond, fmt.Errorf("ratelimit: reserve: %w", context.DeadlineExceeded))
	m.DatabaseCall(httpadmit.OpReserve, time.Millisecond, errors.New("connection refused"))
	m.ObserveRecover(ratelimit.RecoveryResult{Skipped: true}, nil, time.Millisecond)
	m.ObserveRecover(ratelimit.RecoveryResult{ReleasedConcurrencyLeases: 4}, nil, time.Millisecond)
	m.ObservePrune(ratelimit.PruneResult{Skipped: true}, nil, time.Millisecond)
	page := scrape(t, reg)
	for _, want := range []string{
		`pgadmit_db_operation_duration_seconds_count{operation="reserve",result="timeout"} 1`,
		`pgadmit_db_operation_duration_seconds_count{operation="reserve",result="error"} 1`,
		`pgadmit_db_operation_duration_seconds_count{operation="recover",result="skipped"} 1`,
		`pgadmit_db_operation_duration_seconds_count{operation="recover",result="ok"} 1`,
		`pgadmit_db_operation_duration_seconds_count{operation="prune",result="skipped"} 1`,
		`pgadmit_recovered_total{kind="leases"} 4`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	if _, err := promadmit.New(reg); err == nil {
		t.Errorf("registering twice on one registry: no error")
	}
	if _, err := promadmit.New(prometheus.NewRegistry(), promadmit.WithNearLimit(1.5)); err == nil {
		t.Errorf("a near-limit threshold of 150%%: no error")
	}
}

// A nil Option sets nothing: New used to panic calling it.
func TestNewTakesNilOptions(t *testing.T) {
	t.Parallel()
	var unset promadmit.Option
	m, err := promadmit.New(prometheus.NewRegistry(), unset, promadmit.WithMaxSeries(1), nil)
	if err != nil || m == nil {
		t.Fatalf("New with nil options: %v, %v", m, err)
	}
}

// Bad arguments and options are typed errors naming them, as bad input is
// everywhere else in pgadmit; they were strings errors.As could not match.
func TestNewRefusesBadOptionsWithValidationErrors(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		field string
		build func() error
	}{
		"nil registerer": {"reg", func() error { _, err := promadmit.New(nil); return err }},
		"threshold above 1": {"WithNearLimit", func() error {
			_, err := promadmit.New(prometheus.NewRegistry(), promadmit.WithNearLimit(1.5))
			return err
		}},
		"NaN threshold": {"WithNearLimit", func() error {
			_, err := promadmit.New(prometheus.NewRegistry(), promadmit.WithNearLimit(math.NaN()))
			return err
		}},
		"no series": {"WithMaxSeries", func() error {
			_, err := promadmit.New(prometheus.NewRegistry(), promadmit.WithMaxSeries(0))
			return err
		}},
		"nil limiter": {"limiter", func() error { _, err := promadmit.NewCombiningCollector(nil); return err }},
	} {
		err := tc.build()
		var invalid *ratelimit.ValidationError
		if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != tc.field {
			t.Errorf("%s: %v, want a *ratelimit.ValidationError on %s", name, err, tc.field)
		}
	}
}

// The Observer methods and ObserveRecover/ObservePrune are public: a
// caller other than the middleware may report a label that is not UTF-8,
// or a count below zero. Prometheus panics on both (WithLabelValues, a
// counter's Add); the metrics take them instead.
func TestObserverMethodsTakeAnyInput(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t)
	m.Decided([]httpadmit.LimitOutcome{{Limit: limit("team\xff", "k", "tok\xfens", 10, 1, httpadmit.Enforce), Outcome: "admitted\xff"}})
	m.DatabaseCall("reserve\xff", time.Millisecond, nil)
	m.ObserveRecover(ratelimit.RecoveryResult{FailedTasks: -1, ReleasedConcurrencyLeases: 2}, nil, time.Millisecond)
	m.ObservePrune(ratelimit.PruneResult{Tasks: -3}, nil, time.Millisecond)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	page := rec.Body.String()
	for _, want := range []string{
		// The scope type and metric keep what is UTF-8 of them; an outcome
		// or an operation that is none of the documented ones is "other".
		"pgadmit_http_admissions_total{metric=\"tok\ufffdns\",mode=\"enforce\",outcome=\"other\",scope_type=\"team\ufffd\"} 1",
		"pgadmit_db_operation_duration_seconds_count{operation=\"other\",result=\"ok\"} 1",
		`pgadmit_recovered_total{kind="failed_tasks"} 0`,
		`pgadmit_recovered_total{kind="leases"} 2`,
		`pgadmit_pruned_total{kind="tasks"} 0`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, page)
		}
	}
}
