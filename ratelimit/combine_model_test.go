package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// modelRun is an operation for the combiner whose batches behave at
// random, as statements do: answered after a while (or cut off when their
// context ends, rolled back), failing whole, rejected whole for one bad
// request's input (and then that request alone), refusing some requests,
// panicking. It books every request granted; abandoned books what went to
// nobody.
type modelRun struct {
	mu        sync.Mutex
	rng       *rand.Rand
	granted   map[int]int // request -> times a statement granted it
	abandoned map[int]int
	sent      map[int]int // request -> statements it went in
	ended     map[int]bool
	running   atomic.Int64
	maxSeen   atomic.Int64
	// waiting reads the combiner's Stats.Waiting; undercounted records
	// a statement that found fewer calls waiting than it carried.
	waiting      func() int64
	undercounted atomic.Pointer[string]
}

func (m *modelRun) random(n int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rng.IntN(n)
}

func bad(req int) bool     { return req%13 == 5 }
func refused(req int) bool { return req%7 == 3 }

func (m *modelRun) run(ctx context.Context, reqs []int) ([]int, []error, error) {
	n := m.running.Add(1)
	defer m.running.Add(-1)
	for {
		seen := m.maxSeen.Load()
		if n <= seen || m.maxSeen.CompareAndSwap(seen, n) {
			break
		}
	}
	if w := m.waiting(); w < int64(len(reqs)) {
		msg := fmt.Sprintf("a statement of %d calls ran with %d waiting", len(reqs), w)
		m.undercounted.CompareAndSwap(nil, &msg)
	}
	m.mu.Lock()
	for _, r := range reqs {
		m.sent[r]++
	}
	m.mu.Unlock()
	select {
	case <-time.After(time.Duration(m.random(1500)) * time.Microsecond):
	case <-ctx.Done():
		return nil, nil, ctx.Err() // cancelled: rolled back
	}
	switch m.random(40) {
	case 0:
		return nil, nil, errors.New("connection lost")
	case 1:
		panic("boom")
	}
	for _, r := range reqs {
		if bad(r) {
			return nil, nil, fmt.Errorf("batch: %w", &pgconn.PgError{Code: "22023", Message: fmt.Sprintf("request %d", r)})
		}
	}
	res, errs := make([]int, len(reqs)), make([]error, len(reqs))
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, r := range reqs {
		if refused(r) {
			errs[i] = fmt.Errorf("refused %d", r)
			continue
		}
		res[i] = r
		m.granted[r]++
	}
	return res, errs, nil
}

func (m *modelRun) abandon(res int, _ time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.abandoned[res]++
}

// Many callers on a combiner whose statements behave at random, whose
// contexts end at random (or never, or before the call), get each a
// result that adds up: a request is granted at most once, and what was
// granted either reached its caller or went to abandoned, never both and
// never neither; a request whose ctx had ended before the call is never
// sent; a caller that cannot leave always gets the statement's own answer
// (its grant, its refusal, or the batch's error, errors.As-able); a bad
// request fails alone. Every statement runs with at least its calls
// counted waiting (Stats.Waiting). Once drained, nothing is in flight,
// queued or counted waiting, and the goroutines are gone.
func TestCombinerRandomCallsAddUp(t *testing.T) {
	before := runtime.NumGoroutine()
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		m := &modelRun{rng: rand.New(rand.NewPCG(seed, 8)), granted: map[int]int{}, abandoned: map[int]int{}, sent: map[int]int{}, ended: map[int]bool{}}
		maxBatch, maxInFlight := 1+rng.IntN(16), 1+rng.IntN(3)
		c := newCombiner(maxBatch, maxInFlight, m.run, m.abandon)
		c.leftGrace = time.Duration(rng.IntN(2000)) * time.Microsecond
		m.waiting = func() int64 { return c.stats().Waiting }
		if rng.IntN(2) == 0 {
			c.weighed(4, func(r int) int { return 1 + r%3 })
		}
		var (
			mu   sync.Mutex
			held = map[int]int{}
			wg   sync.WaitGroup
			next atomic.Int64
		)
		for w := range 24 {
			wg.Add(1)
			wrng := rand.New(rand.NewPCG(seed, uint64(100+w)))
			go func() {
				defer wg.Done()
				for range 60 {
					req := int(next.Add(1))
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					kind := wrng.IntN(4)
					switch kind {
					case 1: // ends at random
						ctx, cancel = context.WithTimeout(ctx, time.Duration(wrng.IntN(3000))*time.Microsecond)
					case 2: // ended before the call
						ctx, cancel = context.WithCancel(ctx)
						cancel()
						mu.Lock()
						m.mu.Lock()
						m.ended[req] = true
						m.mu.Unlock()
						mu.Unlock()
					case 3: // can end, does not
						ctx, cancel = context.WithCancel(ctx)
					}
					res, err := c.do(ctx, req)
					cancel()
					switch {
					case err == nil:
						if res != req {
							t.Errorf("request %d: result %d", req, res)
						}
						mu.Lock()
						held[req]++
						mu.Unlock()
					case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
						if kind == 0 || kind == 3 {
							t.Errorf("request %d: %v for a caller whose ctx never ended", req, err)
						}
					case kind == 0 || kind == 3:
						var pgErr *pgconn.PgError
						switch {
						case refused(req) && err.Error() == fmt.Sprintf("refused %d", req):
						case bad(req) && errors.As(err, &pgErr) && pgErr.Message == fmt.Sprintf("request %d", req):
						case err.Error() == "connection lost":
						case len(err.Error()) > 40 && err.Error()[:40] == "ratelimit: a combined batch panicked: bo":
						default:
							t.Errorf("request %d: %v", req, err)
						}
					}
				}
			}()
		}
		wg.Wait()
		c.drain()
		m.mu.Lock()
		mu.Lock()
		for req := 1; req <= int(next.Load()); req++ {
			g, h, a := m.granted[req], held[req], m.abandoned[req]
			if g > 1 || g != h+a {
				t.Errorf("seed %d request %d: granted %d times, held %d, abandoned %d", seed, req, g, h, a)
			}
			if m.ended[req] && m.sent[req] > 0 {
				t.Errorf("seed %d request %d: ctx ended before the call, sent %d times", seed, req, m.sent[req])
			}
		}
		mu.Unlock()
		m.mu.Unlock()
		c.mu.Lock()
		if c.inFlight != 0 || c.releasing != 0 || len(c.queue) != 0 {
			t.Errorf("seed %d: drained with %d in flight, %d releasing, %d queued", seed, c.inFlight, c.releasing, len(c.queue))
		}
		c.mu.Unlock()
		if w := c.stats().Waiting; w != 0 {
			t.Errorf("seed %d: drained with %d calls counted waiting", seed, w)
		}
		if msg := m.undercounted.Load(); msg != nil {
			t.Errorf("seed %d: %s", seed, *msg)
		}
		t.Logf("seed %d: batch %d, in flight %d (most running at once %d): %s", seed, maxBatch, maxInFlight, m.maxSeen.Load(), c.stats())
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after drain, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

func (s CombinerStats) String() string {
	return fmt.Sprintf("%d requests in %d statements (%.2f each), %d waiting", s.Requests, s.Batches, s.MeanBatch(), s.Waiting)
}
