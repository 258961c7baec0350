package promadmit_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// WithNearLimit takes a threshold in (0, 1], 1 included: an admission that
// uses a limit up to its threshold counts, so that WithNearLimit(1) counts
// the admissions that filled their limit, and the default the one that
// left it 80% used. Compared with >, no admission ever counted under 1
// (none leaves a limit more than full), and none at exactly 80%.
func TestNearLimitCountsAdmissionsAtTheThreshold(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	limiter := ratelimit.New(pool)
	defer limiter.Close()
	for _, c := range []struct {
		threshold float64
		quota     int
		want      int // admissions, of quota, that left the limit at least threshold used
	}{
		{1, 2, 1},   // the second filled it
		{0.8, 5, 2}, // the fourth left it at 80%, the fifth full
	} {
		t.Run(fmt.Sprint(c.threshold), func(t *testing.T) {
			reg, metrics := newRegistered(t, promadmit.WithNearLimit(c.threshold))
			key := fmt.Sprintf("near-%v-%d", c.threshold, time.Now().UnixNano())
			mw, err := httpadmit.New(limiter, func(*http.Request) ([]httpadmit.Limit, error) {
				return []httpadmit.Limit{limit("api_key", key, ratelimit.MetricRequests, float64(c.quota), 1, httpadmit.Enforce)}, nil
			}, httpadmit.WithObserver(metrics), httpadmit.WithDecisionTimeout(10*time.Second),
				httpadmit.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for i := range c.quota {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
				if rec.Code != http.StatusOK {
					t.Fatalf("request %d: %d", i+1, rec.Code)
				}
			}
			want := fmt.Sprintf(`pgadmit_http_near_limit_total{metric="requests",scope_type="api_key"} %d`, c.want)
			page := scrape(t, reg)
			if !strings.Contains(page, want+"\n") {
				var near []string
				for _, line := range strings.Split(page, "\n") {
					if strings.HasPrefix(line, "pgadmit_http_near_limit_total") {
						near = append(near, line)
					}
				}
				t.Errorf("after %d admissions of %d under WithNearLimit(%v), /metrics lacks %s; it has %q", c.quota, c.quota, c.threshold, want, near)
			}
		})
	}
}
