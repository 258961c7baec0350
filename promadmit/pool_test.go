package promadmit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

const (
	poolAcquired     = "pgadmit_pool_acquired_connections"
	poolIdle         = "pgadmit_pool_idle_connections"
	poolConstructing = "pgadmit_pool_constructing_connections"
	poolMax          = "pgadmit_pool_max_connections"
	poolAcquires     = "pgadmit_pool_acquires_total"
	poolEmpty        = "pgadmit_pool_empty_acquires_total"
	poolWait         = "pgadmit_pool_empty_acquire_wait_seconds_total"
	poolCanceled     = "pgadmit_pool_canceled_acquires_total"
)

// poolRegistry registers pool's collector on a registry of its own.
func poolRegistry(t *testing.T, pool *pgxpool.Pool) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	registerPool(t, reg, pool)
	return reg
}

// poolValues are the values of reg's metrics (none has a label), or an
// error for a scrape that failed or holds a series twice.
func poolValues(reg prometheus.Gatherer) (map[string]float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	values := map[string]float64{}
	for _, f := range families {
		if len(f.GetMetric()) != 1 {
			return nil, fmt.Errorf("%s: %d series", f.GetName(), len(f.GetMetric()))
		}
		m := f.GetMetric()[0]
		values[f.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return values, nil
}

// wantPool checks the values reg serves now against want, exactly, and
// returns them.
func wantPool(t *testing.T, reg prometheus.Gatherer, step string, want map[string]float64) map[string]float64 {
	t.Helper()
	got, err := poolValues(reg)
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	if len(got) != 8 {
		t.Errorf("%s: %d metrics, want 8: %v", step, len(got), got)
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s: %s = %v (present %v), want %v", step, name, g, ok, v)
		}
	}
	return got
}

// A pool of two connections, both held: an acquire that gives up counts as
// canceled, one that waits for a release as an empty acquire, with its
// wait, one that finds an idle connection as neither; the gauges follow
// the connections; a scrape after Close serves the counts it had. Scrapes in the background all along succeed and see no
// counter go down; the registry passes promlint.
func TestPoolCollectorSaturatedPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 2, 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	// Every connection the test takes, released before pool.Close, which
	// waits for them, when a failure ends the test while it holds some.
	var taken []*pgxpool.Conn
	t.Cleanup(func() {
		for _, c := range taken {
			c.Release()
		}
	})
	reg := poolRegistry(t, pool)

	stop, scraped := make(chan struct{}), make(chan error, 1)
	var stopOnce sync.Once
	stopScraping := func() { stopOnce.Do(func() { close(stop) }) }
	t.Cleanup(stopScraping)
	go func() {
		last := map[string]float64{}
		for scrapes := 0; ; scrapes++ {
			select {
			case <-stop:
				if scrapes == 0 {
					scraped <- errors.New("no scrape in the background")
				}
				scraped <- nil
				return
			default:
			}
			got, err := poolValues(reg)
			if err != nil {
				scraped <- err
				return
			}
			for name, v := range got {
				if strings.HasSuffix(name, "_total") && v < last[name] {
					scraped <- fmt.Errorf("%s went down from %v to %v", name, last[name], v)
					return
				}
			}
			last = got
			time.Sleep(time.Millisecond)
		}
	}()

	wantPool(t, reg, "a new pool", map[string]float64{poolAcquired: 0, poolIdle: 0, poolConstructing: 0, poolMax: 2,
		poolAcquires: 0, poolEmpty: 0, poolWait: 0, poolCanceled: 0})
	held := make([]*pgxpool.Conn, 2)
	for i := range held {
		if held[i], err = pool.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		taken = append(taken, held[i])
	}
	// Each opened a connection: it found none idle.
	got := wantPool(t, reg, "both held", map[string]float64{poolAcquired: 2, poolIdle: 0, poolConstructing: 0,
		poolAcquires: 2, poolEmpty: 2, poolCanceled: 0})
	opening := got[poolWait]
	if !(opening > 0) {
		t.Errorf("both held: %s = %v: opening two connections took no time", poolWait, opening)
	}

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if c, err := pool.Acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an acquire from a full pool: %v, %v; want context.DeadlineExceeded", c, err)
	}
	wantPool(t, reg, "one gave up", map[string]float64{poolAcquired: 2, poolIdle: 0,
		poolAcquires: 2, poolEmpty: 2, poolWait: opening, poolCanceled: 1})

	type acquired struct {
		conn *pgxpool.Conn
		took time.Duration
		err  error
	}
	// An acquire that waits for a connection released. Nothing tells when
	// it has begun to wait: one whose goroutine was held up until after
	// the release finds the connection idle (an acquire, not an empty one,
	// and no wait), and then holds it as the released one was held, so
	// the step is tried again (late counts the tries that came late).
	var waiter acquired
	late := 0
	for {
		started, done := make(chan struct{}), make(chan acquired, 1)
		go func() {
			start := time.Now()
			close(started)
			c, err := pool.Acquire(ctx)
			done <- acquired{c, time.Since(start), err}
		}()
		<-started
		time.Sleep(100 * time.Millisecond) // the acquire waits for a connection
		held[0].Release()
		waiter = <-done
		if waiter.err != nil {
			t.Fatal(waiter.err)
		}
		taken = append(taken, waiter.conn)
		got = wantPool(t, reg, "one acquired after a release", map[string]float64{poolAcquired: 2, poolIdle: 0, poolConstructing: 0,
			poolAcquires: float64(3 + late), poolCanceled: 1})
		if got[poolEmpty] == 3 {
			break
		}
		wantPool(t, reg, "one came after the release", map[string]float64{poolEmpty: 2, poolWait: opening})
		if late++; late == 5 {
			t.Fatalf("in %d tries, no acquire waited for the connection released 100ms after it began", late)
		}
		t.Logf("try %d: the acquire came after the release; again", late)
		held[0] = waiter.conn
	}
	if waited := got[poolWait] - opening; !(waited > 0) || waited > waiter.took.Seconds() {
		t.Errorf("one waited: %s rose by %v, want above 0 and at most the %v its Acquire took", poolWait, waited, waiter.took)
	}

	waiter.conn.Release()
	held[1].Release()
	got = wantPool(t, reg, "all released", map[string]float64{poolAcquired: 0, poolIdle: 2, poolConstructing: 0,
		poolAcquires: float64(3 + late), poolEmpty: 3, poolCanceled: 1})
	// An idle connection taken: an acquire, not an empty one, and no wait.
	idle, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	taken = append(taken, idle)
	wantPool(t, reg, "an idle one taken", map[string]float64{poolAcquired: 1, poolIdle: 1, poolConstructing: 0,
		poolAcquires: float64(4 + late), poolEmpty: 3, poolWait: got[poolWait], poolCanceled: 1})
	idle.Release()
	pool.Close()
	wantPool(t, reg, "closed", map[string]float64{poolAcquired: 0, poolIdle: 0, poolConstructing: 0, poolMax: 2,
		poolAcquires: float64(4 + late), poolEmpty: 3, poolWait: got[poolWait], poolCanceled: 1})

	stopScraping()
	if err := <-scraped; err != nil {
		t.Errorf("a scrape in the background: %v", err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// A connection being opened is a constructing one; an acquire that gave
// up waiting for it is canceled, and got nothing. Here the server accepts
// the connection and never answers, until Close gives up on it.
func TestPoolCollectorConnectionBeingOpened(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept() // and never answers
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + ln.Addr().String() + "/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	reg := poolRegistry(t, pool)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if c, err := pool.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an acquire from a server that never answers: %v, %v; want context.DeadlineExceeded", c, err)
	}
	// The pool goes on opening the connection for the acquires to come.
	wantPool(t, reg, "opening", map[string]float64{poolAcquired: 0, poolIdle: 0, poolConstructing: 1, poolMax: 1,
		poolAcquires: 0, poolEmpty: 0, poolWait: 0, poolCanceled: 1})
	pool.Close()
	wantPool(t, reg, "closed", map[string]float64{poolAcquired: 0, poolIdle: 0, poolConstructing: 0, poolMax: 1,
		poolAcquires: 0, poolEmpty: 0, poolWait: 0, poolCanceled: 1})
}

// Several pools in one process: each collector registered through
// WrapRegistererWith with one label name; a second collector of a pool
// beside the first fails with an AlreadyRegisteredError. A nil or zero
// pool is refused with a *ratelimit.ValidationError on "pool" (a zero
// pool's Stat panics).
func TestPoolCollectorsOfSeveralPools(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	gateway := pgtest.OpenPool(t, "postgres://postgres@127.0.0.1:1/postgres?pool_max_conns=3") // never connects: Stat reads memory
	for name, pool := range map[string]*pgxpool.Pool{
		"gateway":     gateway,
		"maintenance": pgtest.OpenPool(t, "postgres://postgres@127.0.0.1:1/postgres?pool_max_conns=1"),
	} {
		registerPool(t, prometheus.WrapRegistererWith(prometheus.Labels{"pool": name}, reg), pool)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pgadmit_pool_max_connections The most connections the pgx pool opens (MaxConns).
# TYPE pgadmit_pool_max_connections gauge
pgadmit_pool_max_connections{pool="gateway"} 3
pgadmit_pool_max_connections{pool="maintenance"} 1
`), poolMax); err != nil {
		t.Error(err)
	}
	again, err := promadmit.NewPoolCollector(gateway)
	if err != nil {
		t.Fatal(err)
	}
	var already prometheus.AlreadyRegisteredError
	if err := prometheus.WrapRegistererWith(prometheus.Labels{"pool": "gateway"}, reg).Register(again); !errors.As(err, &already) {
		t.Errorf("a second collector of the gateway pool: %v, want an AlreadyRegisteredError", err)
	}

	for name, pool := range map[string]*pgxpool.Pool{"nil pool": nil, "zero pool": {}} {
		c, err := func() (c prometheus.Collector, err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			return promadmit.NewPoolCollector(pool)
		}()
		var invalid *ratelimit.ValidationError
		if c != nil || !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "pool" {
			t.Errorf("%s: %v, %v; want nil and a *ratelimit.ValidationError on pool", name, c, err)
		}
	}
}
