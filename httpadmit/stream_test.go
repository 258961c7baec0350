package httpadmit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A streaming handler behind the middleware, over a real connection: the
// client gets the headers and each chunk as it is flushed, before the
// handler writes the next; the request is committed with the usage the
// handler reported at the end.
func TestStreaming(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricTokens, 10_000, 1000),
		concurrent("model", key, 2),
	))
	next := make(chan struct{})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := w.(http.Flusher); !ok {
			t.Error("the writer is not an http.Flusher")
		}
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("ResponseController.SetWriteDeadline through the middleware: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 5 {
			fmt.Fprintf(w, "data: token %d\n\n", i)
			if err := rc.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
			}
			_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: float64(10 * (i + 1))})
			<-next // the client read this chunk
		}
	})))
	defer srv.Close()

	resp, err := http.Post(srv.URL, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get(httpadmit.HeaderRateLimit) == "" || resp.Header.Get("x-ratelimit-remaining-tokens") != "9000" {
		t.Errorf("streamed response headers: %v", resp.Header)
	}
	if resp.ContentLength != -1 {
		t.Errorf("ContentLength = %d, want a stream", resp.ContentLength)
	}
	br := bufio.NewReader(resp.Body)
	for i := range 5 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: token %d\n", i) {
			t.Fatalf("chunk %d: %q, %v", i, line, err)
		}
		_, _ = br.ReadString('\n')
		next <- struct{}{}
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Errorf("after the stream: %q, %v", rest, err)
	}
	e.nothingHeld()
	if got, want := e.books("api_key", key, ratelimit.MetricTokens), (book{Used: 50}); got != want {
		t.Errorf("tokens = %+v, want %+v", got, want)
	}
}

// A client that goes away mid-stream: the request is released when it
// reported nothing, committed with what it reported otherwise, and the
// metrics it did not report at their estimate (a handler that reports the
// request alone as its upstream starts has its tokens committed at the
// estimate, as the package documentation says).
func TestClientCancels(t *testing.T) {
	t.Parallel()
	for _, reported := range []string{"", ratelimit.MetricTokens, ratelimit.MetricRequests} {
		t.Run(fmt.Sprintf("reported %q", reported), func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			key := uniqueKey("key")
			mw := e.middleware(fixed(
				window("api_key", key, ratelimit.MetricRequests, 100, 1),
				window("api_key", key, ratelimit.MetricTokens, 10_000, 1000),
				concurrent("model", key, 2),
			))
			handlerDone := make(chan error, 1)
			srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch reported {
				case ratelimit.MetricTokens:
					_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 30})
				case ratelimit.MetricRequests:
					_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricRequests: 1})
				}
				_, _ = io.WriteString(w, "data: first\n\n")
				http.NewResponseController(w).Flush()
				select { // the upstream keeps streaming until the client is gone
				case <-r.Context().Done():
					handlerDone <- nil
				case <-time.After(10 * time.Second):
					handlerDone <- errors.New("the client's cancellation never reached the handler")
				}
			})))
			defer srv.Close()

			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(resp.Body).ReadString('\n')
			if line != "data: first\n" {
				t.Fatalf("first line %q", line)
			}
			if got := e.liveLeases("model", key); got != 1 {
				t.Errorf("live leases mid-stream = %d, want 1", got)
			}
			cancel()
			resp.Body.Close()
			if err := <-handlerDone; err != nil {
				t.Fatal(err)
			}
			e.nothingHeld()
			want, wantRequests := book{}, book{} // released
			switch reported {
			case ratelimit.MetricTokens:
				want, wantRequests = book{Used: 30}, book{Used: 1} // requests committed at its estimate
			case ratelimit.MetricRequests:
				want, wantRequests = book{Used: 1000}, book{Used: 1} // tokens committed at their estimate
			}
			if got := e.books("api_key", key, ratelimit.MetricTokens); got != want {
				t.Errorf("tokens = %+v, want %+v", got, want)
			}
			if got := e.books("api_key", key, ratelimit.MetricRequests); got != wantRequests {
				t.Errorf("requests = %+v, want %+v", got, wantRequests)
			}
		})
	}
}

// A handler that panics: the request is released before the panic goes on
// to the server, unchanged.
func TestHandlerPanics(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 10_000, 1000), concurrent("model", key, 2)))
	boom := errors.New("boom")
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(boom) }))
	func() {
		defer func() {
			if p := recover(); p != boom {
				t.Errorf("recovered %v, want the handler's own panic value", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	}()
	if got := e.books("api_key", key, ratelimit.MetricTokens); got != (book{}) {
		t.Errorf("tokens after a panic = %+v, want released", got)
	}
	e.nothingHeld()
	if got := e.obs.callCounts()["release ok"]; got != 1 {
		t.Errorf("releases = %d, want 1", got)
	}

	// Over a real server too: net/http recovers the panic and drops the
	// connection; nothing stays held.
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) })))
	defer srv.Close()
	if resp, err := http.Post(srv.URL, "application/json", nil); err == nil {
		resp.Body.Close()
		t.Errorf("a panicking handler answered %d", resp.StatusCode)
	}
	e.nothingHeld()
}

// cutWriter is a connection whose client is gone: every write fails.
type cutWriter struct {
	header http.Header
}

func (w *cutWriter) Header() http.Header       { return w.header }
func (w *cutWriter) WriteHeader(int)           {}
func (w *cutWriter) Write([]byte) (int, error) { return 0, errors.New("write: broken pipe") }

// A stream whose writes fail is released; Discard releases a request the
// upstream never served.
func TestStreamCutAndDiscard(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 10_000, 1000)))
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.WriteString(w, "data: x\n\n"); err == nil {
			t.Error("write to a cut stream succeeded")
		}
	})).ServeHTTP(&cutWriter{header: http.Header{}}, httptest.NewRequest(http.MethodPost, "/", nil))
	if got := e.books("api_key", key, ratelimit.MetricTokens); got != (book{}) {
		t.Errorf("tokens after a cut stream = %+v, want released", got)
	}

	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 5})
		if err := httpadmit.Discard(r.Context(), "upstream_unavailable"); err != nil {
			t.Errorf("Discard: %v", err)
		}
		w.WriteHeader(http.StatusBadGateway)
	})).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if got := e.books("api_key", key, ratelimit.MetricTokens); got != (book{}) {
		t.Errorf("tokens after Discard = %+v, want released", got)
	}
	if diff := e.obs.callCounts(); diff["release ok"] != 2 || diff["commit ok"] != 0 {
		t.Errorf("database calls %v, want 2 releases and no commit", diff)
	}
	e.nothingHeld()
}

// A request that runs longer than its lease's TTL keeps its slot: the
// middleware renews the lease while the handler runs.
//
// The TTL is 5 s, renewed every 1.7 s: a renewal stalled by load for up to
// 3 s still lands in time (with the 1 s TTL this test used, 0.7 s was
// enough to lose the lease). The handler runs until the database's clock
// is past the lease's first expiry and two renewals went through, not for
// a fixed time.
func TestLongRequestKeepsItsLease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	slot := concurrent("model", key, 1)
	slot.LeaseTTL = 5 * time.Second
	mw := e.middleware(fixed(slot))
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, ok := httpadmit.GrantFrom(r.Context())
		if !ok || len(g.Leases) != 1 {
			t.Fatalf("GrantFrom = %+v, %v; want one lease", g, ok)
		}
		firstExpiry := g.Leases[0].ExpiresAt
		for deadline := time.Now().Add(30 * time.Second); !pgtest.DBNow(t, e.pool).After(firstExpiry) || e.obs.callCounts()["renew_leases ok"] < 2; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the lease's first expiry (%s) never passed with two renewals: %v", firstExpiry, e.obs.callCounts())
			}
		}
		if got := e.liveLeases("model", key); got != 1 {
			t.Errorf("live leases past the first expiry of a %s lease = %d, want 1 (renewed)", slot.LeaseTTL, got)
		}
	})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	if got := e.obs.callCounts()["renew_leases ok"]; got < 2 {
		t.Errorf("lease renewals = %d, want at least 2", got)
	}
	e.nothingHeld()
}

// Many real clients at once, each ending its request a different way:
// completing, cancelling mid-stream, hitting a panicking or discarding
// handler, or being refused. Afterwards nothing is held, every counter
// equals its ledger, and the concurrency limit was never exceeded.
func TestNothingLeaksUnderLoad(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	const slots = 3
	mw := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricRequests, 1000, 1),
		window("api_key", key, ratelimit.MetricTokens, 1_000_000, 100),
		concurrent("model", key, slots),
	))
	var inFlight, peak atomicMax
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peak.observe(inFlight.add(1))
		defer inFlight.add(-1)
		switch r.URL.Query().Get("do") {
		case "panic":
			panic(http.ErrAbortHandler)
		case "discard":
			_ = httpadmit.Discard(r.Context(), "upstream_failed")
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		for i := range 4 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			http.NewResponseController(w).Flush()
			_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: float64(i + 1)})
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})))
	defer srv.Close()

	actions := []string{"complete", "cancel", "panic", "discard"}
	codes := make(chan int, 200)
	done := make(chan struct{})
	for c := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 20 {
				action := actions[(c+i)%len(actions)]
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"?do="+action, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					cancel()
					codes <- 0
					continue
				}
				if action == "cancel" {
					_, _ = bufio.NewReader(resp.Body).ReadString('\n')
					cancel()
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
				cancel()
				codes <- resp.StatusCode
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(codes)
	byCode := map[int]int{}
	for c := range codes {
		byCode[c]++
	}
	t.Logf("responses by status (0: connection dropped by a panic): %v; peak in flight %d", byCode, peak.max())
	if byCode[http.StatusTooManyRequests] == 0 || byCode[http.StatusOK] == 0 {
		t.Errorf("want both admissions and refusals by the %d slots: %v", slots, byCode)
	}
	if peak.max() > slots {
		t.Errorf("%d handlers ran at once, limit %d", peak.max(), slots)
	}
	e.nothingHeld()
	if got := e.obs.heldLeases(); got != 0 {
		t.Errorf("leases held as observed = %d, want 0", got)
	}
	if !strings.Contains(fmt.Sprint(e.obs.callCounts()), "release ok") {
		t.Errorf("no release in %v", e.obs.callCounts())
	}
}

// A write the server refuses because the status has no body (204, 304) did
// not fail on the way to the client: the request was served, and is
// committed, not released as a cut stream.
func TestBodyNotAllowedIsNoCutStream(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	srv := httptest.NewServer(e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
			if _, err := io.WriteString(w, "{}\n"); !errors.Is(err, http.ErrBodyNotAllowed) {
				t.Errorf("write after 204: %v, want http.ErrBodyNotAllowed", err)
			}
		})))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("%d, want 204", resp.StatusCode)
	}
	e.nothingHeld()
	if got, want := e.books("api_key", key, ratelimit.MetricRequests), (book{Used: 1}); got != want {
		t.Errorf("requests = %+v, want %+v: the request was served", got, want)
	}
}

// When the database goes away under long requests, their lease renewals
// all fail alike: at most one line a second is logged for them, as for
// failed decisions, not one per request and renewal.
func TestFailedRenewalsAreLoggedOnceASecond(t *testing.T) {
	t.Parallel()
	e, pool := setupClosable(t)
	key := uniqueKey("model")
	slot := concurrent("model", key, 10)
	slot.LeaseTTL = time.Second
	const requests = 4
	var admitted sync.WaitGroup
	admitted.Add(requests)
	h := e.middleware(fixed(slot))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		admitted.Done()
		admitted.Wait()
		pool.Close() // the database is gone for every renewal from now on
		time.Sleep(2500 * time.Millisecond)
	}))
	start := time.Now()
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil)) })
	}
	wg.Wait()
	failed := e.obs.callCounts()["renew_leases error"]
	lines := strings.Count(e.logs.String(), "renewing leases failed")
	t.Logf("%d failed renewals, %d lines logged in %s", failed, lines, time.Since(start).Round(time.Millisecond))
	if failed < 2*requests {
		t.Fatalf("%d failed renewals, want at least %d", failed, 2*requests)
	}
	if lines < 1 || lines > 1+int(time.Since(start)/time.Second) {
		t.Errorf("%d lines logged for %d failed renewals in %s, want one a second", lines, failed, time.Since(start))
	}
}
