package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgadmit/pgadmit/internal/plural"
)

// httpLoad is the demo's clients: real HTTP clients streaming completions
// through the gateway, a few keys hot, every 8th request cancelled after
// its first event.
type httpLoad struct {
	d       *httpDemo
	clients int
	client  *http.Client

	requests, ok, refused, unavailable, other, cancelled, failed atomic.Int64
	inFlight                                                     atomic.Int64
	streamed                                                     atomic.Int64 // events received

	mu      sync.Mutex
	sampled []sample
	lastErr error
}

// sample is a response kept for printing.
type sample struct {
	key, model string
	status     int
	header     http.Header
	body       string
}

func newHTTPLoad(d *httpDemo, clients int) *httpLoad {
	return &httpLoad{d: d, clients: clients, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}}
}

// run sends requests from every client until duration has passed, with a
// progress line each second (the last second's once every client stopped,
// when the deadline comes before its tick).
func (l *httpLoad) run(ctx context.Context, duration time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var wg sync.WaitGroup
	for c := range l.clients {
		wg.Go(func() { l.client1(ctx, mrand.New(mrand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))) })
	}
	fmt.Fprintf(l.d.out, "%5s %6s %6s %6s %6s %9s %9s %9s\n", "time", "req/s", "200", "429", "503", "cancelled", "in flight", "events")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last int64
	progress := func(second int) {
		n := l.requests.Load()
		fmt.Fprintf(l.d.out, "%4ds %6d %6d %6d %6d %9d %9d %9d\n", second, n-last, l.ok.Load(), l.refused.Load(),
			l.unavailable.Load(), l.cancelled.Load(), l.inFlight.Load(), l.streamed.Load())
		last = n
	}
	for second := 1; ; second++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			if time.Duration(second)*time.Second <= duration { // the deadline beat the last second's tick
				progress(second)
			}
			return
		case <-tick.C:
			progress(second)
		}
	}
}

// client1 is one client's loop.
func (l *httpLoad) client1(ctx context.Context, rng *mrand.Rand) {
	for ctx.Err() == nil {
		// Skewed: a third of the requests come from the first two keys.
		i := rng.IntN(len(l.d.keys))
		if rng.IntN(3) == 0 {
			i = rng.IntN(min(2, len(l.d.keys)))
		}
		l.d.requested.mark(i)
		key := l.d.keys[i]
		model := httpModels[rng.IntN(len(httpModels))].name
		body := fmt.Sprintf(`{"model": %q, "max_tokens": %d, "prompt": "say something about admission control", "stream": true}`, model, 50+rng.IntN(750))
		l.one(ctx, key, model, body, rng.IntN(8) == 0)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(rng.IntN(20)) * time.Millisecond):
		}
	}
}

// one sends a request and reads its stream, or cancels after the first
// event.
func (l *httpLoad) one(ctx context.Context, key, model, body string, cancelEarly bool) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, l.d.gateway+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		l.fail(err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	l.requests.Add(1)
	l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	resp, err := l.client.Do(req)
	if err != nil {
		l.fail(err)
		return
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		l.ok.Add(1)
	case http.StatusTooManyRequests:
		l.refused.Add(1)
	case http.StatusServiceUnavailable:
		l.unavailable.Add(1)
	default:
		l.other.Add(1)
	}
	var text strings.Builder
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if resp.StatusCode != http.StatusOK {
			text.WriteString(lines.Text() + "\n")
			continue
		}
		if strings.HasPrefix(lines.Text(), "data: ") {
			l.streamed.Add(1)
			if cancelEarly {
				l.cancelled.Add(1)
				cancel()
				break
			}
		}
	}
	l.keep(sample{key: key, model: model, status: resp.StatusCode, header: resp.Header.Clone(), body: text.String()})
}

// keep remembers the first two admitted responses, and the first refusal
// by each metric.
func (l *httpLoad) keep(s sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, k := range l.sampled {
		if k.status == s.status && (s.status != http.StatusTooManyRequests || k.metric() == s.metric()) {
			n++
		}
	}
	if n == 0 || (n == 1 && s.status == http.StatusOK) {
		l.sampled = append(l.sampled, s)
	}
}

// metric is the metric a refusal's problem body names.
func (s sample) metric() string {
	var p struct {
		Metric string `json:"metric"`
	}
	_ = json.Unmarshal([]byte(s.body), &p)
	return p.Metric
}

func (l *httpLoad) samples() []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sample(nil), l.sampled...)
}

func (l *httpLoad) fail(err error) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastErr == nil {
		l.lastErr = err
	}
}

// summary prints the totals and notes what is wrong with them.
func (l *httpLoad) summary() {
	fmt.Fprintf(l.d.out, "\n%d requests: %d admitted (200), %d refused (429), %d unavailable (503), %d other, %d cancelled mid-stream by their client, %d failed\n",
		l.requests.Load(), l.ok.Load(), l.refused.Load(), l.unavailable.Load(), l.other.Load(), l.cancelled.Load(), l.failed.Load())
	if l.failed.Load() > 0 {
		l.d.problem("%s, the first with: %v", plural.Count(l.failed.Load(), "request failed", "requests failed"), l.lastErr)
	}
	if l.other.Load() > 0 || l.unavailable.Load() > 0 {
		l.d.problem("%s neither 200 nor 429", plural.Count(l.other.Load()+l.unavailable.Load(), "response was", "responses were"))
	}
}
