package httpadmit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A handler that discards with a reason built from the upstream's error
// (long, not valid UTF-8, or with a NUL byte, all of which Release refuses)
// still has its reservation and lease released: nothing stays held.
func TestDiscardWithAnyReasonReleases(t *testing.T) {
	for name, reason := range map[string]string{
		"long":         "upstream error: " + strings.Repeat("x", 600),
		"invalid utf8": "upstream said \xff\xfe",
		"nul":          "upstream\x00error",
	} {
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			key := uniqueKey("k")
			h := e.middleware(fixed(window("api_key", key, ratelimit.MetricRequests, 100, 1), concurrent("model", key, 5)))(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if err := httpadmit.Discard(r.Context(), reason); err != nil {
						t.Errorf("Discard: %v", err)
					}
				}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
			if rec.Code != 200 {
				t.Fatalf("code %d", rec.Code)
			}
			if b := e.books("api_key", key, ratelimit.MetricRequests); b.Reserved != 0 {
				t.Errorf("after Discard(%.20q...): %g still reserved; logs:\n%s", reason, b.Reserved, e.logs)
			}
			if n := e.liveLeases("model", key); n != 0 {
				t.Errorf("after Discard: %d leases still live", n)
			}
		})
	}
}

// An amount between zero and ratelimit.MinAmount, which Commit refuses, is
// refused by ReportUsage, and the request is committed at its estimates.
// ReportUsage used to accept it, and the middleware then released the
// whole request for free when Commit refused it.
func TestReportUsageRefusesWhatCommitWould(t *testing.T) {
	e := setup(t)
	key := uniqueKey("k")
	h := e.middleware(fixed(
		window("api_key", key, ratelimit.MetricRequests, 100, 1),
		window("api_key", key, "cost_usd", 100, 0.01),
	))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := httpadmit.ReportUsage(r.Context(), map[string]float64{"cost_usd": 5e-10})
		if !errors.Is(err, ratelimit.ErrInvalidInput) {
			t.Errorf("ReportUsage(5e-10) = %v, want a validation error", err)
		}
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if b := e.books("api_key", key, ratelimit.MetricRequests); b.Used != 1 || b.Reserved != 0 {
		t.Errorf("requests used %g, reserved %g: want the request committed (1 used); logs:\n%s", b.Used, b.Reserved, e.logs)
	}
	if b := e.books("api_key", key, "cost_usd"); b.Used != 0.01 {
		t.Errorf("cost_usd used %g, want its estimate 0.01", b.Used)
	}
}

// ReportUsage and Discard called once the handler has returned (from a
// goroutine it started) are refused with ErrHandlerReturned: the request
// was settled with what was reported before. They used to return nil and
// change nothing, so the caller believed usage charged that never was.
func TestUsageAfterTheHandlerReturned(t *testing.T) {
	e := setup(t)
	key := uniqueKey("k")
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 1e6, 100)))

	// Every call comes after the handler returned and the request was settled.
	const goroutines = 32
	late := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 2*goroutines)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-late
				errs <- httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 7})
				errs <- httpadmit.Discard(r.Context(), "too late")
			}()
		}
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	close(late)
	wg.Wait()
	close(errs)
	refused := 0
	for err := range errs {
		if errors.Is(err, httpadmit.ErrHandlerReturned) {
			refused++
		} else {
			t.Errorf("a call after the handler returned: %v, want ErrHandlerReturned", err)
		}
	}
	if refused != 2*goroutines {
		t.Errorf("%d of %d late calls refused", refused, 2*goroutines)
	}
	if got, want := e.books("api_key", key, ratelimit.MetricTokens), (book{Used: 100}); got != want {
		t.Errorf("tokens = %+v, want %+v (committed at the estimate)", got, want)
	}

	// Calls racing the handler's return: each is either taken (and the
	// request is committed with it) or refused; none is lost in between.
	for round := range 20 {
		key := uniqueKey("race")
		var accepted atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		h := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 1e6, 100)))(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						switch err := httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 7}); {
						case err == nil:
							accepted.Add(1)
						case !errors.Is(err, httpadmit.ErrHandlerReturned):
							t.Errorf("ReportUsage racing the handler's return: %v", err)
						}
					}()
				}
				close(start)
			}))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
		wg.Wait()
		want := book{Used: 100}
		if accepted.Load() > 0 {
			want = book{Used: 7}
		}
		if got := e.books("api_key", key, ratelimit.MetricTokens); got != want {
			t.Errorf("round %d: %d calls accepted, tokens = %+v, want %+v", round, accepted.Load(), got, want)
		}
	}
	e.nothingHeld()
}
