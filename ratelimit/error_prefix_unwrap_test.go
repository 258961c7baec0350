package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// An error that names the package once (errorf) still wraps the package's
// sentinel itself, as fmt.Errorf's %w did: errors.Unwrap of "ratelimit: get
// task X: unknown task or attempt" is ErrUnknownTask, and a database error
// mapped beside a sentinel ("%w (%s): %w") has the sentinel among the
// errors it wraps. Wrapped in a wrapper of the package's own instead, the
// sentinel was one level down, and promadmit, which takes a class that is
// one of the errors wrapped beside the server's error as naming the error
// whole, labelled a Reserve refused for an unknown or finished task
// "error" (the database's trouble, what an alert pages for), not
// "rejected".
func TestWrappedSentinelsStayTheErrorsWrapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := ratelimit.New(pgtest.NewPool(t))
	const ghost = "00000000-0000-4000-8000-000000000000"
	_, err := l.GetTask(ctx, ghost)
	if got := errors.Unwrap(err); got != ratelimit.ErrUnknownTask {
		t.Errorf("errors.Unwrap(%q) = %#v, want ErrUnknownTask", err, got)
	}

	for _, c := range []struct {
		pgErr    *pgconn.PgError
		sentinel error
	}{
		{&pgconn.PgError{Code: "23503", ConstraintName: "gateway_rate_limit_reservations_task_id_fkey"}, ratelimit.ErrUnknownTask},
		{&pgconn.PgError{Code: "P0T01", Message: "task finished"}, ratelimit.ErrTaskFinished},
	} {
		err := ratelimit.WrapDBError(ctx, "reserve", c.pgErr)
		if n := strings.Count(err.Error(), "ratelimit: "); n != 1 {
			t.Errorf("%q names the package %d times, want once", err, n)
		}
		if !errors.Is(err, c.sentinel) || !errors.Is(err, c.pgErr) {
			t.Errorf("%q: errors.Is %v and the server's error: %v, %v", err, c.sentinel, errors.Is(err, c.sentinel), errors.Is(err, c.pgErr))
		}
		u, ok := err.(interface{ Unwrap() []error })
		if !ok || !slices.Contains(u.Unwrap(), c.sentinel) || !slices.Contains(u.Unwrap(), error(c.pgErr)) {
			t.Errorf("%q (%T) does not wrap %v and the server's error side by side", err, err, c.sentinel)
		}

		reg := prometheus.NewRegistry()
		m, merr := promadmit.New(reg)
		if merr != nil {
			t.Fatal(merr)
		}
		m.DatabaseCall("reserve", time.Millisecond, err)
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		want := `pgadmit_db_operation_duration_seconds_count{operation="reserve",result="` + promadmit.ResultRejected + `"} 1`
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("%q: /metrics lacks %s:\n%s", err, want, rec.Body.String())
		}
	}
}
