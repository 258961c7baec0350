package httpadmit_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A gateway: each request is admitted against its API key's requests and
// tokens (the estimate is the body's max_tokens) and a slot on its model,
// the upstream streams its answer, and the tokens it really used are
// committed. The fourth request of the day is refused with a 429.
// Prometheus metrics are served on /metrics.
func Example() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	// A decision that times out is cancelled: ConfigurePool has the server
	// told, so that the statement's grant is not stranded until its window
	// ends or its lease expires.
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter := ratelimit.New(pool)
	defer limiter.Close() // once the server has stopped, before pool.Close

	// What a request must fit, from its Authorization header and its body.
	// The API key's scope is keyed by a digest of the key, not the key:
	// scope keys are stored, shown and logged in plain text.
	limits := func(r *http.Request) ([]httpadmit.Limit, error) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
		if err != nil { // over 1 MiB: a 413; an upload that broke off: a 400; not the 500 of an error not marked
			return nil, fmt.Errorf("%w: reading the body: %w", httpadmit.ErrBadRequest, err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body)) // the upstream handler reads it again
		var req struct {
			Model     string  `json:"model"`
			MaxTokens float64 `json:"max_tokens"`
		}
		// A zero estimate would reserve no tokens, and tokens reserved on no
		// limit are not charged when reported: ask for max_tokens.
		if key == "" || json.Unmarshal(body, &req) != nil || req.Model == "" || !(req.MaxTokens > 0) {
			return nil, fmt.Errorf("%w: want an API key and a JSON body naming a model and max_tokens", httpadmit.ErrBadRequest)
		}
		digest := sha256.Sum256([]byte(key))
		apiKey := ratelimit.Scope{Type: "api_key", Key: hex.EncodeToString(digest[:16])}
		day := 24 * time.Hour
		return []httpadmit.Limit{
			{Limit: ratelimit.Limit{Scope: apiKey, Metric: ratelimit.MetricRequests, Limit: 3, Amount: 1, Window: day}},
			{Limit: ratelimit.Limit{Scope: apiKey, Metric: ratelimit.MetricTokens, Limit: 100_000, Amount: req.MaxTokens, Window: day}},
			{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "model", Key: req.Model}, Metric: ratelimit.MetricConcurrent, Limit: 50, Amount: 1},
				OnFailure: httpadmit.FailOpen}, // when the database is down, this one alone would not refuse
		}, nil
	}

	reg := prometheus.NewRegistry()
	metrics, err := promadmit.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	// The Limiter's own counts, which alerts need: what it may have left held for nobody
	// (pgadmit_lost_total), its give-backs and its Local limits' blocks.
	combining, err := promadmit.NewCombiningCollector(limiter)
	if err != nil {
		log.Fatal(err)
	}
	// And its pool's: statements waiting for a connection (pgadmit_pool_empty_acquires_total).
	poolStats, err := promadmit.NewPoolCollector(pool)
	if err != nil {
		log.Fatal(err)
	}
	reg.MustRegister(combining, poolStats)
	admit, err := httpadmit.New(limiter, limits, httpadmit.WithObserver(metrics),
		// The default (250 ms) suits a warm pool; this example's first request also prepares
		// its statements on a cold connection of a busy test database.
		httpadmit.WithDecisionTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	// The upstream call: stream the answer, reporting the tokens spent so far
	// with each event (the running total of the upstream's usage), so that a
	// client that leaves mid-stream is charged what the upstream spent: a
	// request whose client left before any report is released, not charged.
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		spent := 0.0
		for _, token := range []string{"Hello", ",", " world"} {
			spent += 140
			_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: spent})
			fmt.Fprintf(w, "data: %s\n\n", token)
			http.NewResponseController(w).Flush()
		}
	})

	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", admit(upstream))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	gateway := httptest.NewServer(mux)
	defer gateway.Close()

	for i := range 4 {
		req, _ := http.NewRequest(http.MethodPost, gateway.URL+"/v1/chat/completions",
			strings.NewReader(`{"model": "gpt-4o", "max_tokens": 1000}`))
		req.Header.Set("Authorization", "Bearer key_example")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if i == 0 {
			fmt.Println("RateLimit-Policy:", resp.Header.Get("RateLimit-Policy"))
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			var problem httpadmit.Problem
			_ = json.Unmarshal(body, &problem)
			fmt.Println(resp.StatusCode, "Retry-After set:", resp.Header.Get("Retry-After") != "",
				"violated-policies:", problem.ViolatedPolicies)
			continue
		}
		fmt.Printf("%d remaining: requests %s, tokens %s; streamed %q\n", resp.StatusCode,
			resp.Header.Get("x-ratelimit-remaining-requests"), resp.Header.Get("x-ratelimit-remaining-tokens"), tokens(body))
	}

	// A body over the 1 MiB the limits read is refused before anything is reserved.
	big, err := http.Post(gateway.URL+"/v1/chat/completions", "application/json", strings.NewReader(strings.Repeat(" ", 1<<20+1)))
	if err != nil {
		log.Fatal(err)
	}
	var problem httpadmit.Problem
	_ = json.NewDecoder(big.Body).Decode(&problem)
	big.Body.Close()
	fmt.Println(big.StatusCode, problem.Detail)

	resp, err := http.Get(gateway.URL + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), `pgadmit_http_admissions_total{metric="requests"`) || strings.HasPrefix(lines.Text(), "pgadmit_lost_total ") {
			fmt.Println(lines.Text())
		}
	}
	// Output:
	// RateLimit-Policy: "requests";q=3;w=86400, "tokens";q=100000;pgadmit-qu="tokens";w=86400, "concurrent";q=50;qu="concurrent-requests"
	// 200 remaining: requests 2, tokens 99000; streamed "Hello, world"
	// 200 remaining: requests 1, tokens 98580; streamed "Hello, world"
	// 200 remaining: requests 0, tokens 98160; streamed "Hello, world"
	// 429 Retry-After set: true violated-policies: [requests]
	// 413 the request body is larger than the 1048576 bytes it may hold
	// pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="admitted",scope_type="api_key"} 3
	// pgadmit_http_admissions_total{metric="requests",mode="enforce",outcome="refused",scope_type="api_key"} 1
	// pgadmit_lost_total 0
}

// tokens joins the data of a server-sent event stream.
func tokens(stream []byte) string {
	var b strings.Builder
	for line := range strings.Lines(string(stream)) {
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			b.WriteString(strings.TrimSuffix(data, "\n"))
		}
	}
	return b.String()
}

// A handler that reports from another goroutine (the one reading the
// upstream, say) waits for it before returning: the request is settled
// with what was reported when the handler returns, and a report made
// after that is refused with ErrHandlerReturned, not charged.
func ExampleReportUsage() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.ExampleURL()) // your DATABASE_URL, migrated with schema.Migrate
	if err != nil {
		log.Fatal(err)
	}
	// A decision that times out is cancelled: ConfigurePool has the server
	// told, so that the statement's grant is not stranded until its window
	// ends or its lease expires.
	ratelimit.ConfigurePool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limits := func(r *http.Request) ([]httpadmit.Limit, error) {
		return []httpadmit.Limit{{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "key_report_usage"},
			Metric: ratelimit.MetricTokens, Limit: 100_000, Amount: 1000, Window: 24 * time.Hour}}}, nil
	}
	limiter := ratelimit.New(pool)
	defer limiter.Close()
	admit, err := httpadmit.New(limiter, limits, httpadmit.WithDecisionTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}

	returned, late := make(chan struct{}), make(chan error)
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reported := make(chan error)
		go func() {
			reported <- httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 420})
		}()
		fmt.Println("reported before returning:", <-reported)
		go func() { // left running: it reports too late
			<-returned
			late <- httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 9000})
		}()
	})
	admit(upstream).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	close(returned)
	err = <-late
	fmt.Println("reported after returning:", errors.Is(err, httpadmit.ErrHandlerReturned))

	// The next request sees the 420 tokens charged, and its own 1000 reserved.
	rec := httptest.NewRecorder()
	admit(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	fmt.Println("remaining tokens:", rec.Header().Get("x-ratelimit-remaining-tokens"))
	// Output:
	// reported before returning: <nil>
	// reported after returning: true
	// remaining tokens: 98580
}
