package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricsURLLine is what recover --every --http says on stderr once it listens: the URL of its page.
const metricsURLLine = `(?m)^pgadmit recover: serving /metrics on (http://\S+/metrics)$`

// scrape reads the page at url and returns the value of each series it names (the series as the
// page writes it, labels sorted), failing the test on a page it cannot read.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v\n%s", url, resp.Status, err, body)
	}
	series := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("GET %s: a line that is no series: %q", url, line)
		}
		series[line[:i]] = v
	}
	return series
}

// awaitSeries scrapes url until ok says its series are what the test waits for, at most 30s, and
// returns them.
func awaitSeries(t *testing.T, url, what string, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := scrape(t, url)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never came within 30s; the page's pgadmit series:\n%v", what, pgadmitSeries(s))
		}
	}
}

// pgadmitSeries is the pgadmit_ series of s that are not 0 nor histogram buckets, for a failure's message.
func pgadmitSeries(s map[string]float64) []string {
	var shown []string
	for name, v := range s {
		if strings.HasPrefix(name, "pgadmit_") && v != 0 && !strings.Contains(name, "_bucket{") {
			shown = append(shown, name+" "+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return shown
}

const recoverOK = `pgadmit_db_operations_total{operation="recover",result="ok"}`

// okPasses counts the passes of the sweeper's log that ran to their end: what it recovered, or nothing.
func okPasses(log string) int {
	return len(regexp.MustCompile(`(?m)^\S+ recover: (nothing to recover|released \d+ leases) .*\(\d+(\.\d+)?m?s\)$`).FindAllString(log, -1))
}

// recover --every --http serves promadmit's metrics on /metrics while it sweeps: each pass counted
// in pgadmit_db_operations_total{operation="recover"}, what a pass gave back (the lease of a
// request whose process died) in pgadmit_recovered_total, its pool's statistics and the build
// info. A sweeper run as the CLI exported nothing, and no alert could see it stop. SIGINT stops
// the sweeper and closes the server.
func TestRecoverSweeperServesItsMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	sweeper := startCLI(t, ctx, "--database-url", url, "recover", "--every", "100ms", "--http", "127.0.0.1:0")
	awaitLog(t, &sweeper.stderr, metricsURLLine)
	page := regexp.MustCompile(metricsURLLine).FindStringSubmatch(sweeper.stderr.String())[1]

	// The passes, counted as they run: each scrape counts every pass logged before it, and at
	// most the one that ends meanwhile beyond those logged after it.
	last := 0.0
	for range 2 {
		before := okPasses(sweeper.stdout.String())
		s := awaitSeries(t, page, "a pass more", func(s map[string]float64) bool { return s[recoverOK] > last })
		after := okPasses(sweeper.stdout.String())
		if n := s[recoverOK]; n < float64(before) || n > float64(after+1) {
			t.Errorf("%s is %g, between %d passes logged before the scrape and %d after it", recoverOK, n, before, after)
		}
		last = s[recoverOK]
	}

	// A request whose process died (its 1s execution lease expires): the pass that takes it
	// back counts what it gave back.
	gatewayRequest(t, pool, time.Second, 0)
	s := awaitSeries(t, page, "the dead request's lease recovered", func(s map[string]float64) bool {
		return s[`pgadmit_recovered_total{kind="leases"}`] > 0
	})
	for series, want := range map[string]float64{
		`pgadmit_recovered_total{kind="leases"}`:                          1,
		`pgadmit_recovered_total{kind="reservations"}`:                    1,
		`pgadmit_recovered_total{kind="failed_attempts"}`:                 1,
		`pgadmit_recovered_total{kind="failed_tasks"}`:                    1,
		`pgadmit_recovered_total{kind="requeued_tasks"}`:                  0,
		`pgadmit_pool_max_connections`:                                    2,
		`pgadmit_db_operations_total{operation="recover",result="error"}`: 0,
	} {
		if got, ok := s[series]; !ok || got != want {
			t.Errorf("%s: %g (on the page: %t), want %g", series, got, ok, want)
		}
	}
	// promadmit counts a run, then observes its duration: a scrape between the two (a pass that
	// ends as it runs) sees one run more counted than timed.
	timed := s[`pgadmit_db_operation_duration_seconds_count{operation="recover",result="ok"}`]
	if s[recoverOK] <= last || s[`pgadmit_pool_acquires_total`] < 1 || timed < s[recoverOK]-1 || timed > s[recoverOK] {
		t.Errorf("the passes, their durations and the pool's acquires: %v", pgadmitSeries(s))
	}
	if !hasSeries(s, `pgadmit_build_info{goversion="`) {
		t.Errorf("no pgadmit_build_info on the page: %v", pgadmitSeries(s))
	}

	// SIGINT ends the sweeper and the server with it.
	if code := sweeper.stop(); code != exitOK {
		t.Fatalf("recover --every --http: exit %d, stderr %q", code, sweeper.stderr.String())
	}
	if errOut := sweeper.stderr.String(); strings.Count(errOut, "\n") != 1 || !regexp.MustCompile(metricsURLLine+`\n\z`).MatchString(errOut) {
		t.Errorf("stderr, want only where it serves: %q", sweeper.stderr.String())
	}
	assertSweeperLog(t, sweeper.stdout.String(), `recover: released 1 lease and 1 reservation; failed 1 attempt; `, `recover: stopped$`)
	if resp, err := http.Get(page); err == nil {
		resp.Body.Close()
		t.Errorf("GET %s after the sweeper stopped: %s, want no server", page, resp.Status)
	}
}

// hasSeries says whether s has a series whose name begins with prefix.
func hasSeries(s map[string]float64, prefix string) bool {
	for name := range s {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// --http is the sweeper's: without --every (a single pass, done before a scrape could read it)
// it is a usage error, and so is an address that is none; one that cannot be bound (another
// process listens there) fails at once, exit 1, before the sweeper logs or connects anything.
func TestRecoverHTTPNeedsEveryAndAnAddressItCanBind(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	noDB := "postgres://u@127.0.0.1:1/db" // never reached: each case ends before connecting
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"--http", "127.0.0.1:0"}, exitUsage,
			"pgadmit recover: --http needs --every: a single pass ends before anything could read its metrics (see pgadmit recover --help)\n"},
		{[]string{"--every", "1s", "--http", "9187"}, exitUsage,
			`pgadmit recover: --http "9187": want HOST:PORT or :PORT, such as 127.0.0.1:9187 or :9187 (see pgadmit recover --help)` + "\n"},
		{[]string{"--every", "1s", "--http", "127.0.0.1:metrics"}, exitUsage,
			`pgadmit recover: --http "127.0.0.1:metrics": want HOST:PORT or :PORT, such as 127.0.0.1:9187 or :9187 (see pgadmit recover --help)` + "\n"},
		{[]string{"--every", "1s", "--http", ""}, exitUsage,
			`pgadmit recover: --http "": want HOST:PORT or :PORT, such as 127.0.0.1:9187 or :9187 (see pgadmit recover --help)` + "\n"},
		{[]string{"--every", "1s", "--http", taken.Addr().String()}, exitFailure,
			"pgadmit recover: cannot serve /metrics on " + taken.Addr().String() + ": listen tcp " + taken.Addr().String() + ": bind: address already in use\n"},
	} {
		done := make(chan struct{})
		var out, errOut string
		var code int
		go func() {
			defer close(done)
			out, errOut, code = cli(t, nil, append([]string{"--database-url", noDB, "recover"}, c.args...)...)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("recover %q still runs after 10s, want it to fail at once", c.args)
		}
		if code != c.code || errOut != c.stderr || out != "" {
			t.Errorf("recover %q: exit %d, stderr %q, stdout %q; want exit %d, stderr %q, nothing on stdout", c.args, code, errOut, out, c.code, c.stderr)
		}
	}
}

// A sweeper that cannot open its pool (the database unreachable at start, its server down) runs
// no pass, yet each try to connect is a failed run, as a service's metrics.Recover counts one
// whose Recover cannot connect: counted in pgadmit_db_operations_total{operation="recover"} by
// promadmit's result classes, error for a connection refused (a closed port) and timeout for a
// server that never answers within --connect-timeout. It counted nothing, and an alert on the
// error rate did not see a sidecar stuck at start-up.
func TestRecoverSweeperCountsEachFailedConnect(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close() // nothing listens there now: a connection refused

	// A server that accepts connections and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		var held []net.Conn
		for {
			c, err := silent.Accept()
			if err != nil { // closed: the test is over
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()

	for _, c := range []struct {
		name, addr, result, says string
	}{
		{"refused", closedAddr, "error", "connection refused"},
		{"silent", silent.Addr().String(), "timeout", "no answer within 300ms (--connect-timeout)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := "postgres://u@" + c.addr + "/db?sslmode=disable"
			sweeper := startCLI(t, context.Background(), "--database-url", url, "--connect-timeout", "300ms",
				"recover", "--every", "100ms", "--http", "127.0.0.1:0")
			awaitLog(t, &sweeper.stderr, metricsURLLine)
			page := regexp.MustCompile(metricsURLLine).FindStringSubmatch(sweeper.stderr.String())[1]
			counted := `pgadmit_db_operations_total{operation="recover",result="` + c.result + `"}`
			tries := func() int {
				return strings.Count(sweeper.stdout.String(), c.says)
			}
			before := tries()
			s := awaitSeries(t, page, "two failed connects counted", func(s map[string]float64) bool { return s[counted] >= 2 })
			after := tries()
			if n := s[counted]; n < float64(before) || n > float64(after+1) {
				t.Errorf("%s is %g, between %d tries logged before the scrape and %d after it", counted, n, before, after)
			}
			// A try is counted, then its duration observed: a scrape between them sees one less.
			if got := s[`pgadmit_db_operation_duration_seconds_count{operation="recover",result="`+c.result+`"}`]; got < s[counted]-1 || got > s[counted] {
				t.Errorf("the failed connects' durations: %g observed, %g counted", got, s[counted])
			}
			for _, r := range []string{"ok", "error", "timeout", "skipped", "canceled"} {
				if r != c.result && s[`pgadmit_db_operations_total{operation="recover",result="`+r+`"}`] != 0 {
					t.Errorf("result %s counted, want only %s: %v", r, c.result, pgadmitSeries(s))
				}
			}
			if hasSeries(s, "pgadmit_pool_") {
				t.Errorf("pool statistics served before any pool opened: %v", pgadmitSeries(s))
			}
			if code := sweeper.stop(); code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, sweeper.stderr.String())
			}
		})
	}
}
