package httpadmit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A request whose context's deadline passed (behind http.TimeoutHandler,
// or a server's request timeout) is released with the reason
// request_deadline_exceeded: it was released as client_disconnected,
// though its client never left. A request whose client left (its context
// cancelled) is still client_disconnected.
func TestDeadlinePassedIsNoDisconnect(t *testing.T) {
	t.Parallel()
	const deadline = "request_deadline_exceeded"
	t.Run("deadline passes while Reserve waits", func(t *testing.T) {
		e := setup(t)
		key := uniqueKey("k")
		h := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil)) // the counter row, committed
		ctx := context.Background()
		blocker, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = blocker.Rollback(ctx) }()
		if n, err := testq.OpsLockScopeCounters(ctx, blocker, dbtest.OpsLockScopeCountersParams{ScopeType: "api_key", ScopeKey: key}); err != nil || n == 0 {
			t.Fatalf("OpsLockScopeCounters: %d rows, %v", n, err)
		}
		rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		served := make(chan int)
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil).WithContext(rctx))
			served <- rec.Code
		}()
		pgtest.AwaitLockWaiters(t, e.pool, "the request's Reserve")
		<-rctx.Done()
		if err := blocker.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if code := <-served; code != http.StatusOK {
			t.Fatalf("code %d, want the request admitted (the decision has its own timeout)", code)
		}
		e.releasedAs(key, deadline)
	})
	t.Run("http.TimeoutHandler", func(t *testing.T) {
		e := setup(t)
		key := uniqueKey("k")
		upstream := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }) // an upstream that never answers
		h := http.TimeoutHandler(e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(upstream), 50*time.Millisecond, "timeout")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("code %d, want TimeoutHandler's 503", rec.Code)
		}
		e.releasedAs(key, deadline)
	})
	t.Run("http.TimeoutHandler inside the middleware", func(t *testing.T) {
		// Its 503 is the handler's own answer, given as it returns: the
		// middleware learns of no deadline, and commits the request. The
		// package documentation says to put it around the middleware.
		e := setup(t)
		key := uniqueKey("k")
		upstream := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		h := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(http.TimeoutHandler(upstream, 50*time.Millisecond, "timeout"))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("code %d, want TimeoutHandler's 503", rec.Code)
		}
		e.nothingHeld()
		if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 1}); got != want {
			t.Errorf("requests = %+v, want %+v: committed", got, want)
		}
	})
	// A stream the server cuts at its WriteTimeout: the write fails on its
	// deadline, and net/http cancels the request's context as it does for
	// a client that left (which the middleware took it for), though the
	// client was still reading.
	//
	// The WriteTimeout runs from the request's arrival, so the header must
	// reach the client within it, after the TLS handshake (which it bounds
	// too) and the middleware's Reserve: with 2 busy cores and -race that
	// took up to 600ms, and 300ms failed the client's GET. The handler
	// writes until the server cuts it, however late that is.
	const writeTimeout = 3 * time.Second
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("server's WriteTimeout, HTTP/2 %v", h2), func(t *testing.T) {
			t.Parallel() // each waits out the WriteTimeout
			e := setup(t)
			key := uniqueKey("k")
			failed := make(chan error, 1)
			h := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rc := http.NewResponseController(w)
				for i, start := 0, time.Now(); time.Since(start) < 10*writeTimeout; i++ {
					_, _ = fmt.Fprintf(w, "data: token %d\n\n", i)
					if err := rc.Flush(); err != nil {
						failed <- err
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				failed <- nil
			}))
			srv := httptest.NewUnstartedServer(h)
			srv.Config.WriteTimeout = writeTimeout
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := io.Copy(io.Discard, resp.Body); n == 0 { // the client reads to the end the server gives
				t.Error("the client read nothing of the stream before the server cut it")
			}
			_ = resp.Body.Close()
			if err := <-failed; !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("the handler's flush: %v, want the server's write deadline", err)
			}
			e.releasedAs(key, deadline)
		})
	}
	t.Run("client gone", func(t *testing.T) {
		e := setup(t)
		key := uniqueKey("k")
		ctx, cancel := context.WithCancel(context.Background())
		h := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			cancel() // the server cancels a request's context when its client leaves
			<-r.Context().Done()
		}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil).WithContext(ctx))
		e.releasedAs(key, "client_disconnected")
	})
}

// releasedAs fails the test unless, within a few seconds, the reservations
// of key that are not committed are one, released with reason.
func (e *env) releasedAs(key, reason string) {
	e.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rows, err := testq.ReservationsByReason(context.Background(), e.pool, dbtest.ReservationsByReasonParams{ScopeType: "api_key", ScopeKey: key})
		if err != nil {
			e.t.Fatalf("ReservationsByReason: %v", err)
		}
		var released []dbtest.ReservationsByReasonRow
		open := false
		for _, r := range rows {
			switch r.Status {
			case ratelimit.StatusReleased:
				released = append(released, r)
			case ratelimit.StatusCommitted:
			default:
				open = true
			}
		}
		if !open && len(released) > 0 {
			if len(released) != 1 || released[0].Reason != reason || released[0].Reservations != 1 {
				e.t.Fatalf("reservations %+v, want one released with reason %q", rows, reason)
			}
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("reservations %+v: none released within 5s", rows)
		}
	}
}
