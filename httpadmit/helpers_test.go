package httpadmit_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

var (
	queries = db.New()
	testq   = dbtest.New() // test-only statements
)

// longWindow keeps exact-number tests away from window boundaries.
const longWindow = ratelimit.MaxWindow

// env is one test's database, limiter and what its middleware reported.
type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	limiter *ratelimit.Limiter
	obs     *recorder
	logs    *lockedBuffer
}

func setup(t *testing.T) *env {
	t.Helper()
	pool := pgtest.NewPool(t)
	return &env{t: t, pool: pool, limiter: ratelimit.New(pool), obs: &recorder{}, logs: &lockedBuffer{}}
}

// setupClosable is setup with the limiter on a pool of its own, which the
// test may close to take the database away from the middleware (the env's
// pool, which checks the books, stays open).
func setupClosable(t *testing.T) (*env, *pgxpool.Pool) {
	t.Helper()
	e := setup(t)
	pool := pgtest.OpenPool(t, e.pool.Config().ConnString())
	e.limiter = ratelimit.New(pool)
	return e, pool
}

// middleware builds the middleware with the env's observer and logger, and
// a decision timeout generous enough for a loaded test machine (failure
// tests set their own).
func (e *env) middleware(limits httpadmit.LimitsFunc, opts ...httpadmit.Option) func(http.Handler) http.Handler {
	e.t.Helper()
	base := []httpadmit.Option{
		httpadmit.WithObserver(e.obs),
		httpadmit.WithLogger(slog.New(slog.NewTextHandler(e.logs, nil))),
		httpadmit.WithDecisionTimeout(10 * time.Second),
	}
	mw, err := httpadmit.New(e.limiter, limits, append(base, opts...)...)
	if err != nil {
		e.t.Fatalf("httpadmit.New: %v", err)
	}
	return mw
}

// fixed is a LimitsFunc that gives every request the same limits.
func fixed(limits ...httpadmit.Limit) httpadmit.LimitsFunc {
	return func(*http.Request) ([]httpadmit.Limit, error) { return limits, nil }
}

func uniqueKey(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

func window(scopeType, key, metric string, limit, amount float64) httpadmit.Limit {
	return httpadmit.Limit{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: scopeType, Key: key},
		Metric: metric, Limit: limit, Amount: amount, Window: longWindow}}
}

func concurrent(scopeType, key string, limit float64) httpadmit.Limit {
	return httpadmit.Limit{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: scopeType, Key: key},
		Metric: ratelimit.MetricConcurrent, Limit: limit, Amount: 1}}
}

// book is what the database holds for one scope and metric.
type book struct {
	Used, Reserved float64
}

// books sums the counters of a scope's metric over its windows.
func (e *env) books(scopeType, key, metric string) book {
	e.t.Helper()
	rows, err := queries.CounterListByScope(context.Background(), e.pool, db.CounterListByScopeParams{ScopeType: scopeType, ScopeKey: key})
	if err != nil {
		e.t.Fatalf("CounterListByScope: %v", err)
	}
	var b book
	for _, r := range rows {
		if r.Metric == metric {
			b.Used += r.UsedValue
			b.Reserved += r.ReservedValue
		}
	}
	return b
}

// liveLeases counts a scope's live leases.
func (e *env) liveLeases(scopeType, key string) int64 {
	e.t.Helper()
	row, err := testq.LeaseLiveByScope(context.Background(), e.pool, dbtest.LeaseLiveByScopeParams{ScopeType: scopeType, ScopeKey: key})
	if err != nil {
		e.t.Fatalf("LeaseLiveByScope: %v", err)
	}
	return row.Leases
}

// nothingHeld fails the test unless, within a few seconds, the database
// holds no open reservation and no unreleased lease, and the doctor finds
// the books balanced.
func (e *env) nothingHeld() {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, err := testq.OpsStateSummary(context.Background(), e.pool)
		if err != nil {
			e.t.Fatalf("OpsStateSummary: %v", err)
		}
		if s.ReservationsOpen == 0 && s.LeasesUnreleased == 0 && s.CountersReserved == 0 {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("still held after 5s: %d open reservations, %d unreleased leases, %g reserved in counters",
				s.ReservationsOpen, s.LeasesUnreleased, s.CountersReserved)
		}
		time.Sleep(20 * time.Millisecond)
	}
	report, err := ratelimit.NewMaintenance(e.pool).Doctor(context.Background())
	if err != nil {
		e.t.Fatalf("Doctor: %v", err)
	}
	if !report.OK() {
		e.t.Fatalf("doctor: %s", report)
	}
}

// recorder is an httpadmit.Observer that keeps everything it is told.
type recorder struct {
	mu      sync.Mutex
	decided [][]httpadmit.LimitOutcome
	calls   []string // "op ok", "op exceeded", "op error"
	leases  int
}

func (r *recorder) Decided(outcomes []httpadmit.LimitOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.decided = append(r.decided, outcomes)
}

func (r *recorder) DatabaseCall(op string, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	result := "ok"
	switch {
	case err == nil:
	case isExceeded(err):
		result = "exceeded"
	default:
		result = "error"
	}
	r.calls = append(r.calls, op+" "+result)
}

func (r *recorder) LeasesHeld(delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leases += delta
}

// outcomes counts outcomes by "outcome mode metric".
func (r *recorder) outcomes() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[string]int{}
	for _, d := range r.decided {
		for _, o := range d {
			n[fmt.Sprintf("%s %s %s", o.Outcome, o.Limit.Mode, o.Limit.Metric)]++
		}
	}
	return n
}

// callCounts counts database calls by "op result".
func (r *recorder) callCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[string]int{}
	for _, c := range r.calls {
		n[c]++
	}
	return n
}

func (r *recorder) heldLeases() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leases
}

func isExceeded(err error) bool {
	var e *ratelimit.ExceededError
	return errors.As(err, &e)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// sfItem is one member of a Structured Field List, for comparisons.
type sfItem struct {
	Name   string
	Params map[string]any
}

// parseList parses a Structured Field List header, failing the test when
// it is not one.
func parseList(t *testing.T, h http.Header, name string) []sfItem {
	t.Helper()
	if len(h.Values(name)) == 0 {
		return nil
	}
	list, err := httpsfv.UnmarshalList(h.Values(name))
	if err != nil {
		t.Fatalf("%s %q is not a Structured Field List: %v", name, h.Values(name), err)
	}
	var out []sfItem
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s: member %#v is not an Item", name, m)
		}
		s, ok := item.Value.(string)
		if !ok {
			t.Fatalf("%s: item %#v is not a String", name, item.Value)
		}
		p := map[string]any{}
		for _, k := range item.Params.Names() {
			p[k], _ = item.Params.Get(k)
		}
		out = append(out, sfItem{Name: s, Params: p})
	}
	return out
}

func nan() float64 { return math.NaN() }

// shadow is l in shadow mode.
func shadow(l httpadmit.Limit) httpadmit.Limit {
	l.Mode = httpadmit.Shadow
	return l
}

// failOpen is l failing open.
func failOpen(l httpadmit.Limit) httpadmit.Limit {
	l.OnFailure = httpadmit.FailOpen
	return l
}

// atomicMax counts and keeps the largest count seen.
type atomicMax struct {
	mu     sync.Mutex
	n, top int
}

func (a *atomicMax) add(d int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n += d
	return a.n
}

func (a *atomicMax) observe(v int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.top = max(a.top, v)
}

func (a *atomicMax) max() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.top
}

// quietProxy is a httputil.ReverseProxy to the server at to, whose own log lines go nowhere (a
// cut stream's are expected) and whose errors go to errorHandler (nil: the proxy's 502).
func quietProxy(t *testing.T, to string, errorHandler func(http.ResponseWriter, *http.Request, error)) *httputil.ReverseProxy {
	t.Helper()
	u, err := url.Parse(to)
	if err != nil {
		t.Fatal(err)
	}
	p := httputil.NewSingleHostReverseProxy(u)
	p.ErrorLog = log.New(io.Discard, "", 0)
	p.ErrorHandler = errorHandler
	return p
}
