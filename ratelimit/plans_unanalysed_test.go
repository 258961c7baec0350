package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A new deployment's tables have never been analysed (autovacuum has not
// come by yet, or is off), and the planner then guesses their contents
// from their size alone. The flows that take a list of rows must still
// find each by its index: RenewLeases of 1,000 leases read every live
// lease once per lease (a nested loop over a sequential scan) and took
// 1-7 s, against 10-20 ms by primary key.
func TestListFlowsUseIndexesOnUnanalysedTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, pool := setup(t)
	const holders = 1000
	grants := make([]ratelimit.Grant, holders)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < holders; i += 16 {
				g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{
					window("api_key", fmt.Sprintf("unanalysed-%d", i%50), ratelimit.MetricTokens, 1e9, 3),
					concurrent("model", fmt.Sprintf("unanalysed-%d", i%10), 1e6),
				})
				if err != nil {
					t.Error(err)
					return
				}
				grants[i] = g
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	var leases []ratelimit.Lease
	for _, g := range grants {
		leases = append(leases, g.Leases...)
	}
	var joined ratelimit.Grant
	for _, g := range grants[:250] { // one call of pgadmit_settle
		joined.Reservations = append(joined.Reservations, g.Reservations...)
		joined.Leases = append(joined.Leases, g.Leases...)
	}
	ids := make([]pgtype.UUID, len(leases))
	ttls := make([]int32, len(leases))
	for i, lease := range leases {
		ids[i], ttls[i] = mustUUID(t, lease.ID), 60
	}
	flows := map[string]func(l *ratelimit.Limiter) error{
		"RenewLeases": func(l *ratelimit.Limiter) error {
			renewed, err := l.RenewLeases(ctx, leases)
			if err == nil && len(renewed) != holders {
				err = fmt.Errorf("renewed %d leases, want %d", len(renewed), holders)
			}
			return err
		},
		"ReleaseLeases": func(l *ratelimit.Limiter) error {
			n, err := l.ReleaseLeases(ctx, leases, "test")
			if err == nil && n != holders {
				err = fmt.Errorf("released %d leases, want %d", n, holders)
			}
			return err
		},
		"Commit": func(l *ratelimit.Limiter) error {
			_, err := l.Commit(ctx, joined, map[string]float64{ratelimit.MetricTokens: 2})
			return err
		},
	}
	statements := map[string]func(tx pgx.Tx) error{
		// The renewal itself. RenewLeases first locks the leases' scopes
		// (LeaseLockScopes), whose one lookup of the given ids may read the
		// table once, as it does when they are most of it: that scan is
		// linear; the renewal's was one per lease.
		"LeaseRenew": func(tx pgx.Tx) error {
			renewed, err := queries.LeaseRenew(ctx, tx, db.LeaseRenewParams{LeaseIds: ids, TtlSeconds: ttls})
			if err == nil && len(renewed) != holders {
				err = fmt.Errorf("renewed %d leases, want %d", len(renewed), holders)
			}
			return err
		},
	}
	for name, flow := range flows {
		statements[name] = func(tx pgx.Tx) error { return flow(l.WithTx(tx)) }
	}
	for name, run := range statements {
		for _, s := range scansOf(t, pool, run) {
			// The one linear scan of LeaseLockScopes (above) is allowed.
			allowed := int64(0)
			if name == "RenewLeases" && s.TableName == "gateway_concurrency_leases" {
				allowed = 1
			}
			if s.SeqScans > allowed {
				t.Errorf("%s: %d sequential scan(s) of %s", name, s.SeqScans, s.TableName)
			}
		}
	}
}
