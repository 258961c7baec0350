package httpadmit_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A shadow limit that would refuse every request of a hot key logs one line
// a second for it, not one per request, and its next line says how many it
// held back; another key's refusals still get a line of their own. The
// Observer counts every refusal. It logged a line per refusal: a hot key
// refused 10,000 times a second flooded the log.
func TestShadowRefusalsLogOneLineASecondPerLimit(t *testing.T) {
	t.Parallel()
	e := setup(t)
	logs := &lockedBuffer{}
	key, hot, cold := uniqueKey("key"), uniqueKey("team"), uniqueKey("team")
	mw := e.middleware(func(r *http.Request) ([]httpadmit.Limit, error) {
		return []httpadmit.Limit{
			window("api_key", key, ratelimit.MetricRequests, 100, 1),
			shadow(window("team", r.Header.Get("Team"), ratelimit.MetricRequests, 0, 1)), // would refuse every request
		}, nil
	}, httpadmit.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	serve := func(team string) {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("Team", team)
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%d %s, want 200: a shadow limit never refuses", rec.Code, rec.Body)
		}
	}
	start := time.Now()
	for range 5 {
		serve(hot)
	}
	serve(cold)
	elapsed := time.Since(start)
	time.Sleep(time.Second + 100*time.Millisecond) // past the hot key's interval: its next refusal is logged
	serve(hot)

	type tally struct{ lines, suppressed int }
	got := map[string]tally{}
	for line := range strings.Lines(logs.String()) {
		var rec struct {
			Msg        string `json:"msg"`
			ScopeKey   string `json:"scope_key"`
			Suppressed int    `json:"similar_lines_suppressed"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Msg == "pgadmit: shadow limit would refuse" {
			tl := got[rec.ScopeKey]
			tl.lines++
			tl.suppressed += rec.Suppressed
			got[rec.ScopeKey] = tl
		}
	}
	// Every refusal of the hot key is either a line or counted in the next.
	if g := got[hot]; g.lines+g.suppressed != 6 {
		t.Errorf("hot key: %d lines and %d held back, want 6 refusals in all:\n%s", g.lines, g.suppressed, logs)
	}
	if elapsed < time.Second {
		if g := got[hot]; g != (tally{lines: 2, suppressed: 4}) {
			t.Errorf("hot key: %d lines, %d held back; want 2 lines (one a second), the second saying 4 were held back:\n%s",
				g.lines, g.suppressed, logs)
		}
	}
	if g := got[cold]; g != (tally{lines: 1}) {
		t.Errorf("cold key: %+v, want its own line, not held back by the hot key's:\n%s", g, logs)
	}
	if n := e.obs.outcomes()["shadow_refused shadow requests"]; n != 7 {
		t.Errorf("%d shadow refusals observed, want 7", n)
	}
	e.nothingHeld()
}
