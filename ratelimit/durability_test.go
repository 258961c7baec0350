package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// A caller told that an admission or a settlement succeeded finds it in the
// database after the server crashes, from hot batches (which release their
// counter before their first commit is flushed) as from plain ones. Sixteen
// callers over two instances reserve and commit, most of them on one key
// (hot batches), the others on keys of their own (plain batches), while the
// server is stopped at once: whatever it had not written to its WAL is lost.
// After a restart every reservation a caller was told of exists, every
// commit a caller was told of is committed, and the books balance. It runs
// on a throwaway on-disk cluster of its own, whatever DATABASE_URL says.
func TestAcknowledgedWorkSurvivesAServerCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := pgtest.OwnCluster(t, pgcluster.OnDisk()) // crashing a server needs a cluster of the test's own
	pools := poolsOn(t, cluster.URL(), 2, pgx.QueryExecModeCacheStatement)
	if err := schema.Migrate(ctx, pools[0]); err != nil {
		t.Fatal(err)
	}
	limiters := []*ratelimit.Limiter{ratelimit.New(pools[0]), ratelimit.New(pools[1])}

	hot := uniqueKey("hot")
	var mu sync.Mutex
	var reserved, committed []ratelimit.Grant
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 16 {
		l, key := limiters[w%2], hot
		if w%4 == 3 {
			key = uniqueKey("plain")
		}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "requests", 1e9, 1)})
				if err != nil {
					continue // the crash; calls fail until the test stops them
				}
				mu.Lock()
				reserved = append(reserved, g)
				mu.Unlock()
				if _, err := l.Commit(ctx, g, nil); err != nil {
					continue
				}
				mu.Lock()
				committed = append(committed, g)
				mu.Unlock()
			}
		})
	}
	// Crash once the callers have been told of a few hundred commits.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(committed)
		mu.Unlock()
		if n >= 500 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d commits in 30 s", n)
		}
	}
	if err := cluster.Crash(); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}

	var hotStatements int64
	for _, l := range limiters {
		s := l.Stats()
		hotStatements += s.Reserve.Hot + s.Settle.Hot
	}
	if hotStatements == 0 {
		t.Fatal("no statement went as a hot batch; the test proves nothing about them")
	}
	check := poolsOn(t, cluster.URL(), 1, pgx.QueryExecModeCacheStatement)[0]
	statuses := map[string]string{}
	var ids []pgtype.UUID
	for _, g := range reserved {
		ids = append(ids, mustUUID(t, g.Reservations[0].ID))
	}
	rows, err := testq.ReservationStatuses(ctx, check, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		statuses[r.ID.String()] = r.Status
	}
	lost, uncommitted := 0, 0
	for _, g := range reserved {
		if _, ok := statuses[g.Reservations[0].ID]; !ok {
			lost++
		}
	}
	for _, g := range committed {
		if statuses[g.Reservations[0].ID] != ratelimit.StatusCommitted {
			uncommitted++
		}
	}
	if lost > 0 || uncommitted > 0 {
		t.Errorf("after the crash: %d of %d acknowledged reservations missing, %d of %d acknowledged commits not committed",
			lost, len(reserved), uncommitted, len(committed))
	} else {
		t.Logf("%d reservations and %d commits acknowledged before the crash, all there after it (%d hot statements)",
			len(reserved), len(committed), hotStatements)
	}
	assertBooksBalance(t, check, "api_key", hot)
	assertDoctorOK(t, check)
}
