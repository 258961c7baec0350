package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// When the database goes away while requests are served, their commits
// and releases all fail alike: at most one line a second is logged for
// them, each saying how many it stands for, not one per request.
func TestFailedSettlesAreLoggedOnceASecond(t *testing.T) {
	t.Parallel()
	e, pool := setupClosable(t)
	const requests = 12 // in three waves, 1.5 s apart
	var admitted sync.WaitGroup
	admitted.Add(requests)
	var served sync.WaitGroup
	h := e.middleware(fixed(window("api_key", uniqueKey("key"), ratelimit.MetricRequests, 100, 1)))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			admitted.Done()
			admitted.Wait()
			pool.Close() // the database is gone for every settle from now on
			wave, _ := strconv.Atoi(r.URL.Query().Get("wave"))
			time.Sleep(time.Duration(wave) * 1500 * time.Millisecond)
			if r.URL.Query().Get("discard") != "" {
				if err := httpadmit.Discard(r.Context(), "test_discard"); err != nil {
					t.Errorf("Discard: %v", err)
				}
			}
		}))
	start := time.Now()
	for i := range requests {
		served.Go(func() {
			target := "/?wave=" + strconv.Itoa(i%3)
			if i%2 == 1 {
				target += "&discard=1"
			}
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, target, nil))
		})
	}
	served.Wait()
	elapsed := time.Since(start)
	calls := e.obs.callCounts()
	failed := calls["commit error"] + calls["release error"]
	logs := e.logs.String()
	lines := regexp.MustCompile(`msg="pgadmit: (commit|release) failed".*similar_lines_suppressed=(\d+)`).FindAllStringSubmatch(logs, -1)
	t.Logf("%d failed commits, %d failed releases, %d lines logged in %s", calls["commit error"], calls["release error"],
		len(lines), elapsed.Round(time.Millisecond))
	if calls["commit error"] != requests/2 || calls["release error"] != requests/2 {
		t.Fatalf("calls = %v, want %d failed commits and %d failed releases", calls, requests/2, requests/2)
	}
	if len(lines) < 2 || len(lines) > 1+int(elapsed/time.Second) {
		t.Errorf("%d lines logged for %d failed settles in %s, want one a second (at least one per wave after the first):\n%s",
			len(lines), failed, elapsed, logs)
	}
	// Every failed settle is accounted for: logged, or counted by the next
	// line logged. The last wave's suppressed ones have no line after them.
	accounted := 0
	for _, l := range lines {
		n, _ := strconv.Atoi(l[2])
		accounted += 1 + n
	}
	if accounted > failed || accounted < failed-requests/3+1 {
		t.Errorf("lines stand for %d failed settles, want %d less at most the last wave's held back (%d):\n%s",
			accounted, failed, requests/3-1, logs)
	}
}
