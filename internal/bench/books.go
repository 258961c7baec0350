package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/durationtext"
)

// A workload's books: what the counters and leases of its scopes hold once
// it ends, against what its workers admitted and committed, so that a unit
// charged behind the callers' backs (a commit charged twice, a block
// returned at its estimates) fails the run. Scope keys are new in every run
// (its run id), but --rounds reuses them and W1 and W2 share API keys, so
// each read is compared with the previous one of the same scopes (none:
// empty). Nothing is read before a workload: its first statement is its
// own.

// scopeSet names the scopes of one type whose keys begin with keyPrefix.
type scopeSet struct {
	scopeType string
	keyPrefix string
}

// booked is what one admission leaves in a scopeSet once committed:
// charged, per metric of its window limits, what its Commit settles for
// there (each admission of a workload commits the same); leases, whether it
// takes a concurrency slot there, which its Commit releases.
type booked struct {
	label   string        // in the checks' names: "api keys", "provider model"
	window  time.Duration // of the window limits, in the checks' names ("/min"); 0 for none
	scopes  scopeSet
	charged map[string]float64
	leases  bool
}

// holdings is what a scopeSet holds: per metric, the usage and reservations
// of its counters over all their windows, and its unreleased leases.
type holdings struct {
	used, reserved map[string]float64
	leases         int64
}

// perWindow is how a check's name says a limit's window: "/min", "/h",
// "/2s"; "" for none.
func perWindow(w time.Duration) string {
	switch w {
	case 0:
		return ""
	case time.Minute:
		return "/min"
	case time.Hour:
		return "/h"
	}
	return "/" + durationtext.Operator(w)
}

func (r *runner) holdingsOf(ctx context.Context, label string, s scopeSet) (holdings, error) {
	h := holdings{used: map[string]float64{}, reserved: map[string]float64{}}
	q := db.New()
	totals, err := q.CounterTotalsByKeyPrefix(ctx, r.reads, db.CounterTotalsByKeyPrefixParams{ScopeType: s.scopeType, KeyPrefix: s.keyPrefix})
	if err != nil {
		return h, fmt.Errorf("read back the counters of the %s: %w", label, err)
	}
	for _, t := range totals {
		h.used[t.Metric] = t.UsedValue
		h.reserved[t.Metric] = t.ReservedValue
	}
	h.leases, err = q.LeaseCountByKeyPrefix(ctx, r.reads, db.LeaseCountByKeyPrefixParams{ScopeType: s.scopeType, KeyPrefix: s.keyPrefix})
	if err != nil {
		return h, fmt.Errorf("read back the leases of the %s: %w", label, err)
	}
	return h, nil
}

// execModeDB sends the run's own reads (the books, W4's and W9's read-backs)
// in pgx's exec mode (nothing prepared), whatever the pool's default. Behind
// a transaction pooler with pgx's default mode, a statement that another
// client connection prepared on the same server session would fail them;
// the workloads' own errors are what say to change the connection string
// there.
type execModeDB struct{ db.DBTX }

func (e execModeDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return e.DBTX.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (e execModeDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return e.DBTX.Query(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

func (e execModeDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return e.DBTX.QueryRow(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
}

// checkingBooks runs a workload (run) and adds to its result the checks of
// the books of each of its scope sets: per metric, the usage added since
// they were last read equals what its admissions committed, nothing is left
// reserved, and no lease is left held. A workload that failed is returned
// as it is. One any of whose operations failed is not checked, nor are its
// scope sets for the rest of the run: what an operation that failed left
// behind is unknown (a Reserve whose answer was lost, a Commit that may
// have settled).
func (r *runner) checkingBooks(ctx context.Context, books []booked, run func() (Result, error)) (Result, error) {
	res, err := run()
	if err != nil {
		return res, err
	}
	if res.Errors > 0 {
		for _, b := range books {
			r.unknownBooks[b.scopes] = true
		}
		return res, nil
	}
	check := func(name string, want, got int64) {
		res.Checks = append(res.Checks, Check{Name: name, Want: want, Got: got, OK: want == got})
	}
	for _, b := range books {
		if r.unknownBooks[b.scopes] {
			continue
		}
		after, err := r.holdingsOf(ctx, b.label, b.scopes)
		if err != nil {
			return res, err
		}
		before := r.books[b.scopes]
		r.books[b.scopes] = after
		for _, metric := range slices.Sorted(maps.Keys(b.charged)) {
			prefix := fmt.Sprintf("%s %s%s: ", b.label, metric, perWindow(b.window))
			check(prefix+metric+" charged = actual "+metric+" committed",
				int64(b.charged[metric])*res.Admitted, int64(after.used[metric]-before.used[metric]))
			check(prefix+metric+" still reserved", 0, int64(after.reserved[metric]))
		}
		if b.leases {
			check(b.label+" concurrency: leases still held", 0, after.leases)
		}
	}
	return res, nil
}
