package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/deadserver"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// httpDemo is one run of `pgadmit demo --http`.
type httpDemo struct {
	out       io.Writer
	prefix    string
	keys      []string      // API keys; plans[key] is each one's plan
	requested requestedKeys // of keys
	plans     map[string]httpPlan
	gateway   string // base URL
	load      *httpLoad
	problems  []string
}

// runHTTPDemo runs a real HTTP gateway on 127.0.0.1 in front of a fake
// upstream that streams tokens, with clients real HTTP clients, then shows
// headers, a 429, what a down database does, and the gateway's /metrics.
// The gateway fails a request closed when its decision takes longer than
// decisionTimeout.
func runHTTPDemo(ctx context.Context, a *app, duration time.Duration, clients, keys int, decisionTimeout time.Duration) error {
	gr := grace.After(ctx, grace.Default)
	defer gr.End()
	dsn, stop, err := a.database(ctx)
	if err != nil {
		return err
	}
	defer stop()
	pool, err := a.connect(ctx, dsn, int32(clients+4))
	if err != nil {
		return err
	}
	defer func() { gr.ClosePool(pool) }()
	version, err := a.migrate(ctx, pool)
	if err != nil {
		return err
	}
	d := &httpDemo{out: a.stdout, prefix: "demo-http-" + bench.NewRunID()[:6] + "/", plans: map[string]httpPlan{}}
	for i := range keys {
		key := fmt.Sprintf("sk-demo-%04d", i)
		plan := httpPlanPro
		if i%5 == 1 { // one of the two hot keys is on the free plan
			plan = httpPlanFree
		}
		d.keys = append(d.keys, key)
		d.plans[key] = plan
	}
	d.requested = make(requestedKeys, len(d.keys))

	// The fake upstream and the gateway, each a real server on 127.0.0.1.
	upstream, err := serve(upstreamHandler())
	if err != nil {
		return err
	}
	defer upstream.Close()
	limiter := ratelimit.New(pool)
	reg := prometheus.NewRegistry()
	metrics, err := promadmit.New(reg)
	if err != nil {
		return err
	}
	combining, err := promadmit.NewCombiningCollector(limiter)
	if err != nil {
		return err
	}
	if err := reg.Register(combining); err != nil {
		return err
	}
	pooled, err := promadmit.NewPoolCollector(pool)
	if err != nil {
		return err
	}
	if err := reg.Register(pooled); err != nil {
		return err
	}
	admit, err := httpadmit.New(limiter, gatewayLimits(d.prefix, d.plans), httpadmit.WithObserver(metrics),
		httpadmit.WithHeaders(httpadmit.HeadersIETF|httpadmit.HeadersOpenAI|httpadmit.HeadersAnthropic),
		// A 2-core machine running the load and the database: a few ms would
		// fail requests closed under load (500 ms by default); production
		// sets it near its p99.
		httpadmit.WithDecisionTimeout(decisionTimeout),
		httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", admit(proxyHandler(&http.Client{}, upstream.url+"/v1/chat/completions")))
	mux.Handle("GET /metrics", metricsPage(reg))
	gw, err := serve(mux)
	if err != nil {
		return err
	}
	// The gateway stops (its requests in flight settle their admissions), then its Limiter closes
	// (waiting for its give-backs, which the pool's Close would lose), within the grace once
	// interrupted.
	defer func() {
		gr.Wait(gw.Close)
		gr.Close(limiter)
		if gr.LeftHeld() {
			a.warnLeftHeld()
		}
	}()
	d.gateway = gw.url

	fmt.Fprintf(d.out, "pgadmit demo --http: schema version %d; scopes of this run start with %q\n", version, d.prefix)
	fmt.Fprintf(d.out, "fake upstream %s streams tokens; gateway %s admits each request (/metrics is Prometheus)\n", upstream.url, gw.url)
	fmt.Fprintf(d.out, "%s (pro: %s req/min, %s tok/min; free from the 2nd on, every 5th: %s and %s), models large (%s in flight) and small (%s)\n",
		plural.Count(keys, "API key", "API keys"), amounttext.Full(httpPlanPro.requestsMin), amounttext.Full(httpPlanPro.tokensMin), amounttext.Full(httpPlanFree.requestsMin),
		amounttext.Full(httpPlanFree.tokensMin), amounttext.Full(httpModels[0].concurrent), amounttext.Full(httpModels[1].concurrent))
	fmt.Fprintf(d.out, "shadow limits: half the plan's tokens/min, 150 requests/min per model; %s for %s, every 8th cancels mid-stream\n", plural.Count(clients, "client", "clients"), durationtext.Operator(duration))
	// A cold connection's first decisions would take longer than the decision timeout on a
	// loaded machine, and fail closed: warm every one first, as the README advises a gateway.
	began := time.Now()
	warmed, err := limiter.Warm(ctx, gatewayKinds())
	if err != nil {
		return fmt.Errorf("warming the gateway's pool: %w", err)
	}
	fmt.Fprintf(d.out, "warmed the gateway's pool in %s: %s opened, on each an admission decided and committed, then rolled back\n\n",
		durationtext.Operator(time.Since(began).Round(time.Millisecond)), plural.Count(warmed, "connection", "connections"))

	d.load = newHTTPLoad(d, clients)
	d.load.run(ctx, duration)
	// An interrupt during the load or the checks after it leaves "interrupted" alone.
	return closingReport(ctx, d.out, func(w io.Writer) error {
		d.out = w
		return d.report(ctx, pool)
	})
}

// report prints the totals of the load, the samples, the failure policy and the metrics, checks
// that nothing stays held, and says what was wrong.
func (d *httpDemo) report(ctx context.Context, pool *pgxpool.Pool) error {
	d.load.summary()
	d.showSamples()
	if err := d.showFailurePolicy(ctx); err != nil {
		return err
	}
	if err := d.showMetrics(ctx); err != nil {
		return err
	}
	if err := d.checkNothingHeld(ctx, pool); err != nil {
		return err
	}
	if len(d.problems) > 0 {
		for _, p := range d.problems {
			fmt.Fprintf(d.out, "PROBLEM: %s\n", p)
		}
		return &exitError{code: exitFailure, msg: plural.Count(len(d.problems), "problem", "problems")}
	}
	fmt.Fprintln(d.out, "\ndemo --http: ok")
	return nil
}

func (d *httpDemo) problem(format string, args ...any) {
	d.problems = append(d.problems, fmt.Sprintf(format, args...))
}

// showSamples prints the headers of two admitted responses and of a 429
// with its body.
func (d *httpDemo) showSamples() {
	samples := d.load.samples()
	fmt.Fprintln(d.out, "\nRESPONSES (rate-limit headers as the client saw them)")
	byStatus := map[int]int{}
	for _, status := range []int{http.StatusOK, http.StatusTooManyRequests} {
		for i := range samples {
			if samples[i].status == status {
				byStatus[status]++
				printSample(d.out, &samples[i])
			}
		}
	}
	if byStatus[http.StatusOK] == 0 {
		d.problem("no admitted response was sampled")
	}
	if byStatus[http.StatusTooManyRequests] == 0 {
		d.problem("no 429 was sampled: the load never reached a limit")
	}
}

func printSample(w io.Writer, s *sample) {
	fmt.Fprintf(w, "\n  HTTP/1.1 %d %s  (%s, model %s)\n", s.status, http.StatusText(s.status), s.key, s.model)
	names := make([]string, 0, len(s.header))
	for name := range s.header {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		lower := strings.ToLower(name)
		if strings.Contains(lower, "ratelimit") || lower == "retry-after" || lower == "content-type" {
			fmt.Fprintf(w, "  %s: %s\n", name, strings.Join(s.header[name], ", "))
		}
	}
	if s.status != http.StatusOK {
		fmt.Fprintf(w, "\n  %s\n", strings.TrimSpace(s.body))
	}
}

// showFailurePolicy points a second middleware at a database that accepts
// connections and never answers, and at one that is stopped, and times a
// request that fails closed and one that fails open against each.
func (d *httpDemo) showFailurePolicy(ctx context.Context) error {
	fmt.Fprintf(d.out, "\nWHEN THE DATABASE FAILS (decision timeout %s)\n", durationtext.Operator(httpadmit.DefaultDecisionTimeout))
	hanging, err := deadserver.Hang()
	if err != nil {
		return err
	}
	defer hanging.Close()
	stopped, err := deadserver.Stop()
	if err != nil {
		return err
	}
	defer stopped.Close()

	for _, server := range []struct{ name, addr string }{{"hangs", hanging.Addr()}, {"is stopped", stopped.Addr()}} {
		for _, policy := range []httpadmit.FailurePolicy{httpadmit.FailClosed, httpadmit.FailOpen} {
			if err := d.tryFailurePolicy(ctx, server.name, server.addr, policy); err != nil {
				return err
			}
		}
	}
	return nil
}

// tryFailurePolicy times one request whose limit fails by policy, through
// a middleware whose database at addr fails as name says, and reports it.
// Its Limiter is closed before its pool, as a gateway's would be.
func (d *httpDemo) tryFailurePolicy(ctx context.Context, name, addr string, policy httpadmit.FailurePolicy) error {
	cfg, err := pgxpool.ParseConfig(fmt.Sprintf("postgres://pgadmit@%s/pgadmit?sslmode=disable&connect_timeout=2", addr))
	if err != nil {
		return err
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg) // connects on first use, not now
	if err != nil {
		return err
	}
	defer p.Close()
	limiter := ratelimit.New(p)
	defer limiter.Close()
	limits := func(*http.Request) ([]httpadmit.Limit, error) {
		return []httpadmit.Limit{{OnFailure: policy, Limit: ratelimit.Limit{
			Scope: ratelimit.Scope{Type: "api_key", Key: d.prefix + "k"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1}}}, nil
	}
	admit, err := httpadmit.New(limiter, limits, httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return err
	}
	srv, err := serve(admit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "served\n") })))
	if err != nil {
		return err
	}
	defer srv.Close()
	start := time.Now()
	resp, err := http.Post(srv.url, "application/json", strings.NewReader("{}"))
	took := time.Since(start)
	if err != nil {
		return err
	}
	resp.Body.Close()
	fmt.Fprintf(d.out, "  database %-11s %-11s -> %d %s in %.1fms\n", name+":", policy, resp.StatusCode, http.StatusText(resp.StatusCode), took.Seconds()*1000)
	want := http.StatusServiceUnavailable
	if policy == httpadmit.FailOpen {
		want = http.StatusOK
	}
	if resp.StatusCode != want || took > time.Second {
		d.problem("database %s, %s: %d in %s, want %d well within a second", name, policy, resp.StatusCode, took, want)
	}
	return nil
}

// showMetrics scrapes the gateway's /metrics and prints pgadmit's series
// (without histogram buckets).
func (d *httpDemo) showMetrics(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.gateway+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scrape /metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("scrape /metrics: %w", err)
	}
	fmt.Fprintf(d.out, "\nMETRICS (GET %s/metrics, %d bytes; pgadmit's series without histogram buckets and counters at 0)\n", d.gateway, len(body))
	for line := range strings.Lines(string(body)) {
		// promadmit makes some counters at 0 for every label value (79
		// series), lest increase miss a first count: the demo shows what it counted.
		zero := zeroCounter(line)
		if strings.HasPrefix(line, "pgadmit_") && !strings.Contains(line, "_bucket{") && !zero {
			fmt.Fprintf(d.out, "  %s", line)
		}
	}
	for _, want := range []string{`pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="admitted",scope_type="api_key"}`,
		`pgadmit_db_operation_duration_seconds_count{operation="reserve",result="ok"}`} {
		if !strings.Contains(string(body), want) {
			d.problem("/metrics lacks %s", want)
		}
	}
	return nil
}

// zeroCounter says whether line, of a Prometheus text page, is a counter's series (its name
// ending in _total, with labels or without) at 0.
func zeroCounter(line string) bool {
	line = strings.TrimSpace(line)
	name := line[:strings.IndexAny(line+" ", "{ ")]
	return strings.HasSuffix(name, "_total") && strings.HasSuffix(line, " 0")
}

// checkNothingHeld waits until this run's scopes hold no reservation and
// no lease, and asks the doctor.
func (d *httpDemo) checkNothingHeld(ctx context.Context, conn *pgxpool.Pool) error {
	q := db.New()
	var reserved float64
	var leases int64
	deadline := time.Now().Add(5 * time.Second)
	for {
		reserved, leases = 0, 0
		for i, key := range d.keys {
			if !d.requested.has(i) {
				continue // no window
			}
			rows, err := q.CounterListByScope(ctx, conn, db.CounterListByScopeParams{ScopeType: "api_key", ScopeKey: d.prefix + key})
			if err != nil {
				return err
			}
			for _, r := range rows {
				reserved += r.ReservedValue
			}
		}
		for _, m := range httpModels {
			rows, err := q.InspectLeases(ctx, conn, db.InspectLeasesParams{
				ScopeType: pgtype.Text{String: "model", Valid: true}, ScopeKey: pgtype.Text{String: d.prefix + m.name, Valid: true}, MaxRows: 1,
			})
			if err != nil {
				return err
			}
			for _, r := range rows {
				leases += r.LiveLeases
			}
		}
		if (reserved == 0 && leases == 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(d.out, "\nAFTERWARDS: this run's scopes hold %s reserved and %s", amounttext.Full(reserved), plural.Count(leases, "live lease", "live leases"))
	if reserved != 0 || leases != 0 {
		fmt.Fprintln(d.out)
		d.problem("capacity still held after every request ended: %s reserved, %s", amounttext.Full(reserved), plural.Count(leases, "lease", "leases"))
	} else {
		fmt.Fprintln(d.out, ": nothing held")
	}
	report, err := ratelimit.NewMaintenance(conn).Doctor(ctx)
	if err != nil {
		return err
	}
	if !report.OK() {
		d.problem("doctor: %s", report)
		return nil
	}
	fmt.Fprintln(d.out, "doctor: the books balance")
	return nil
}
