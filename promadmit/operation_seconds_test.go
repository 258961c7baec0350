package promadmit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// pgadmit_db_operation_duration_seconds times the whole Reserve (or Commit)
// call as httpadmit made it: its wait in the combiner's queue and for a
// pool connection too, not the statement alone. Its help says so: read as
// the database's time, a pool too small would pass for a slow database.
func TestOperationSecondsCountTheWaitsBeforeTheStatement(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url+"&pool_max_conns=1")
	limiter := ratelimit.New(pool)
	reg, metrics := newRegistered(t)
	mw, err := httpadmit.New(limiter, func(*http.Request) ([]httpadmit.Limit, error) {
		return []httpadmit.Limit{limit("t", "k", ratelimit.MetricRequests, 10, 1, httpadmit.Enforce)}, nil
	}, httpadmit.WithObserver(metrics), httpadmit.WithDecisionTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	held, err := pool.Acquire(context.Background()) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	const wait = 300 * time.Millisecond
	time.AfterFunc(wait, held.Release)
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var f *dto.MetricFamily
	for _, g := range families {
		if g.GetName() == "pgadmit_db_operation_duration_seconds" {
			f = g
		}
	}
	if f == nil {
		t.Fatal("no pgadmit_db_operation_duration_seconds")
	}
	reserves := 0
	for _, m := range f.GetMetric() {
		if !hasLabel(m, "operation", "reserve") {
			continue
		}
		reserves++
		if got := m.GetHistogram().GetSampleSum(); got < (wait - 50*time.Millisecond).Seconds() {
			t.Errorf("reserve seconds %g, want the %v it waited for a connection", got, wait)
		}
	}
	if reserves == 0 {
		t.Error("no reserve observed")
	}
	for _, want := range []string{"queue", "wait for a pool connection"} {
		if !strings.Contains(f.GetHelp(), want) {
			t.Errorf("help %q does not say that %q counts", f.GetHelp(), want)
		}
	}
}

// hasLabel reports whether m has the label name with value.
func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
