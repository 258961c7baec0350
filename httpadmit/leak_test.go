package httpadmit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/leakcheck"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Requests that renew their leases and end each way the middleware
// settles (returning, panicking, hijacking the connection, losing their
// client, their database gone mid-request) leave no goroutine of pgadmit
// running once the server is shut down and the Limiter closed: each
// request's lease renewal stops with it.
//
// Not parallel: it counts the process's goroutines.
func TestNoGoroutineOutlivesItsRequests(t *testing.T) {
	before := leakcheck.Snapshot()
	e := setup(t)
	pool := pgtest.OpenPool(t, e.pool.Config().ConnString())
	limiter := ratelimit.New(pool)
	e.limiter = limiter
	key := uniqueKey("leak")
	slot := concurrent("model", key, 100)
	slot.LeaseTTL = time.Second // renewed every third of a second
	const renewed = 450 * time.Millisecond
	dbGone := make(chan struct{})
	h := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 1000, 1), slot))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			time.Sleep(renewed)
			panic(http.ErrAbortHandler)
		case "/hijack":
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijack: %v", err)
				return
			}
			time.Sleep(renewed)
			_ = conn.Close()
		case "/leave":
			<-r.Context().Done()
		case "/database-gone":
			<-dbGone // its renewals and its settle fail
			time.Sleep(renewed)
		default:
			time.Sleep(renewed)
		}
	}))
	srv := httptest.NewServer(h)
	client := srv.Client()
	done := make(chan struct{})
	paths := []string{"/ok", "/panic", "/hijack", "/leave"}
	for _, path := range paths {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if path == "/leave" {
				time.AfterFunc(renewed, cancel)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, nil)
			if resp, err := client.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}()
	}
	for range paths {
		<-done
	}
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/database-gone", nil)
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
		}
		done <- struct{}{}
	}()
	for e.liveLeases("model", key) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	pool.Close()
	close(dbGone)
	<-done

	srv.Close()
	client.CloseIdleConnections()
	limiter.Close()
	leakcheck.AwaitNone(t, before, 3*time.Second)
	if n := e.obs.heldLeases(); n != 0 {
		t.Errorf("leases held as observed: %d, want 0", n)
	}
}
