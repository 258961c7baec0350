package bench

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// W4's limits.
const (
	w4WindowLimit     = 100
	w4ConcurrentLimit = 10
	w4LeaseTTL        = 10 * time.Minute // far beyond the run: leases are never released by time
)

// w4 runs the exactness workload: all workers reserve 1 on a window limit of 100 for
// ExactnessDuration (exactly 100 must be admitted, and the counter must hold exactly 100), then
// take leases on a concurrent limit of 10 without ever releasing them (exactly 10 must be
// admitted, and exactly 10 leases must be live). Latency and ops cover both parts. Afterwards
// the grants are released, outside the measurement, and so are they when ctx ends before.
func (r *runner) w4(ctx context.Context) (_ Result, err error) {
	d := r.cfg.ExactnessDuration
	window, err := exactWindow(time.Now(), d)
	if err != nil {
		return Result{}, err
	}
	var mu sync.Mutex
	var grants ratelimit.Grant
	// Clean up: give everything back, so that the scopes hold nothing after the run, an
	// interrupted one's too (under the run's grace: 100 reservations in an hour's window, 10
	// leases for 10 minutes). The workers have returned: grants is whole.
	defer func() {
		if rerr := r.grace.Release(r.lims[0], grants, "bench cleanup"); rerr != nil && err == nil {
			err = fmt.Errorf("release W4 grants: %w", rerr)
		}
	}()

	winScope := ratelimit.Scope{Type: "api_key", Key: r.key("w4")}
	winLimit := []ratelimit.Limit{{Scope: winScope, Metric: ratelimit.MetricRequests, Limit: w4WindowLimit, Amount: 1, Window: window}}
	win, err := r.drive(ctx, d, func(ctx context.Context, worker int, _ *mrand.Rand) error {
		g, err := instance(r.lims, worker).Reserve(ctx, "", "", winLimit)
		if err == nil {
			mu.Lock()
			grants.Reservations = append(grants.Reservations, g.Reservations...)
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}

	conScope := ratelimit.Scope{Type: "model", Key: r.key("w4")}
	conLimit := []ratelimit.Limit{{Scope: conScope, Metric: ratelimit.MetricConcurrent, Limit: w4ConcurrentLimit, Amount: 1, LeaseTTL: w4LeaseTTL}}
	con, err := r.drive(ctx, d, func(ctx context.Context, worker int, _ *mrand.Rand) error {
		g, err := instance(r.lims, worker).Reserve(ctx, "", "", conLimit)
		if err == nil {
			mu.Lock()
			grants.Leases = append(grants.Leases, g.Leases...)
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		return Result{}, err
	}

	res := summarize(win, con)
	// What the database holds, read back.
	q := db.New()
	text := func(s string) pgtype.Text { return pgtype.Text{String: s, Valid: true} }
	windows, err := q.InspectWindows(ctx, r.reads, db.InspectWindowsParams{ScopeType: text(winScope.Type), ScopeKey: text(winScope.Key), MaxRows: 10})
	if err != nil {
		return Result{}, fmt.Errorf("read back W4 window: %w", err)
	}
	// The scope's current window of this length: with --rounds, an earlier round may have
	// admitted in a window of another length (exactWindow's choice depends on the time), which
	// is current too.
	var held int64 = -1
	for _, w := range windows {
		if time.Duration(w.WindowSeconds)*time.Second == window {
			// numeric's text; every amount of W4 is 1, so the sums are whole numbers.
			used, err1 := strconv.ParseInt(w.UsedValue, 10, 64)
			reserved, err2 := strconv.ParseInt(w.ReservedValue, 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return Result{}, fmt.Errorf("read back W4 window: %w", err)
			}
			held = used + reserved
		}
	}
	leases, err := q.InspectLeases(ctx, r.reads, db.InspectLeasesParams{ScopeType: text(conScope.Type), ScopeKey: text(conScope.Key), MaxRows: 10})
	if err != nil {
		return Result{}, fmt.Errorf("read back W4 leases: %w", err)
	}
	var live int64
	for _, l := range leases {
		live += l.LiveLeases
	}
	starts := map[time.Time]bool{}
	for _, g := range grants.Reservations {
		starts[g.WindowStart] = true
	}
	windowsUsed := int64(len(starts))
	if windowsUsed == 0 {
		windowsUsed = 1 // nothing admitted: the admitted check fails on its own
	}
	res.Checks = []Check{
		{Name: fmt.Sprintf("window limit %d: admitted", w4WindowLimit), Want: w4WindowLimit, Got: win.res.Admitted},
		{Name: fmt.Sprintf("window limit %d: used + reserved in the database", w4WindowLimit), Want: w4WindowLimit, Got: held},
		{Name: "window limit: windows the admissions fell in", Want: 1, Got: windowsUsed},
		{Name: fmt.Sprintf("concurrent limit %d: admitted", w4ConcurrentLimit), Want: w4ConcurrentLimit, Got: con.res.Admitted},
		{Name: fmt.Sprintf("concurrent limit %d: live leases in the database", w4ConcurrentLimit), Want: w4ConcurrentLimit, Got: live},
	}
	for i := range res.Checks {
		res.Checks[i].OK = res.Checks[i].Want == res.Checks[i].Got
	}
	return res, nil
}

// exactWindow picks a window length, aligned to the Unix epoch like every pgadmit window, whose
// current window still has well over d to run at now: the run then cannot see it roll over
// (a margin of a minute covers clock skew between this host and the database).
func exactWindow(now time.Time, d time.Duration) (time.Duration, error) {
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, ratelimit.MaxWindow} {
		ws := int64(w / time.Second)
		left := time.Duration(ws-now.Unix()%ws) * time.Second
		if left > d+time.Minute {
			return w, nil
		}
	}
	return 0, fmt.Errorf("no window length leaves %s before its end", d)
}
