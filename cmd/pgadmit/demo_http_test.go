package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// The HTTP demo: real clients through a real gateway, the headers of
// admitted and refused responses, the failure policy against a hanging and
// a stopped database, and the gateway's /metrics page, scraped over HTTP.
func TestDemoHTTP(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	start := time.Now()
	// The suite's other tests share the machine's cores with this gateway
	// (and the race detector slows it): a decision may take seconds, which
	// the demo's default timeout would answer with a 503, a problem.
	out := cliOK(t, "--database-url", url, "demo", "--http", "--duration", "5s", "--clients", "8", "--keys", "5", "--decision-timeout", "10s")
	t.Logf("demo --http took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	for _, re := range []string{
		// The gateway's pool warmed before the load: every connection (--clients + 4).
		`(?m)^warmed the gateway's pool in [\d.]+m?s: 12 connections opened, on each an admission decided and committed, then rolled back$`,
		// Progress, one line a second.
		`(?m)^\s+1s(\s+\d+){7}$`,
		`(?m)^\s+5s(\s+\d+){7}$`,
		`(?m)^\d+ requests: \d+ admitted \(200\), \d+ refused \(429\), 0 unavailable \(503\), 0 other, \d+ cancelled mid-stream by their client, 0 failed$`,
		// An admitted response and a refusal, with their headers.
		`(?m)^  HTTP/1.1 200 OK`,
		`(?m)^  Ratelimit-Policy: "requests";q=(60|10);w=60, "tokens";q=(20000|3000);pgadmit-qu="tokens";w=60, "concurrent";q=(8|12);qu="concurrent-requests"$`,
		`(?m)^  Ratelimit: "requests";r=\d+;t=\d+, "tokens";r=\d+;t=\d+, "concurrent";r=\d+$`,
		`(?m)^  X-Ratelimit-Remaining-Tokens: \d+$`,
		`(?m)^  X-Ratelimit-Reset-Requests: [\d.]+m?s$`,
		`(?m)^  Anthropic-Ratelimit-Tokens-Reset: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`,
		`(?m)^  HTTP/1.1 429 Too Many Requests`,
		`(?m)^  Retry-After: \d+$`,
		`(?m)^  \{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",.*"violated-policies":\["(requests|tokens|concurrent)"\]`,
		// The failure policy, each answer well within a second.
		`(?m)^  database hangs:\s+fail_closed -> 503 Service Unavailable in \d+\.\dms$`,
		`(?m)^  database hangs:\s+fail_open\s+-> 200 OK in \d+\.\dms$`,
		`(?m)^  database is stopped: fail_closed -> 503 Service Unavailable in \d+\.\dms$`,
		// The scraped /metrics page.
		`(?m)^  pgadmit_http_admissions_total\{metric="requests",mode="enforce",outcome="admitted",scope_type="api_key"\} [1-9]\d*$`,
		`(?m)^  pgadmit_http_admissions_total\{metric="[a-z]+",mode="enforce",outcome="refused",scope_type="[a-z_]+"\} [1-9]\d*$`,
		`(?m)^  pgadmit_http_admissions_total\{metric="(requests|tokens)",mode="shadow",outcome="admitted",scope_type="[a-z_]+"\} [1-9]\d*$`,
		`(?m)^  pgadmit_db_operation_duration_seconds_count\{operation="reserve",result="ok"\} [1-9]\d*$`,
		`(?m)^  pgadmit_db_operation_duration_seconds_count\{operation="commit",result="ok"\} [1-9]\d*$`,
		`(?m)^  pgadmit_http_leases_held 0$`,
		`(?m)^  pgadmit_combined_calls_total\{kind="reserve"\} [1-9]\d*$`,
		`(?m)^  pgadmit_combined_statement_seconds_total\{kind="settle"\} [0-9.e-]+$`,
		`(?m)^  pgadmit_pool_acquires_total [1-9]\d*$`,
		`(?m)^  pgadmit_pool_max_connections [1-9]\d*$`,
		`this run's scopes hold 0 reserved and 0 live leases: nothing held`,
		`doctor: the books balance`,
		`(?m)^demo --http: ok$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("demo --http output does not match %s", re)
		}
	}
	if strings.Contains(out, "PROBLEM") {
		t.Errorf("demo --http reported a problem")
	}
	// The page is shown "without histogram buckets and counters at 0": those without labels
	// too (pgadmit_lost_total 0, pgadmit_local_blocks_granted_total 0 were shown).
	if zero := regexp.MustCompile(`(?m)^  pgadmit_\w+_total(\{[^}]*\})? 0$`).FindAllString(out, -1); len(zero) > 0 {
		t.Errorf("demo --http shows counters at 0: %q", zero)
	}
	if regexp.MustCompile(`(?m)^  pgadmit_.*sk-demo`).MatchString(out) {
		t.Errorf("a metric shows an API key")
	}
}
