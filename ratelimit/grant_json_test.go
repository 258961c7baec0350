package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A grant that went through JSON (to another process, or a queue) keeps
// its Local reservations as data only: no Limiter can settle them in
// memory. Commit, Release and Attach of such a grant used to refuse it
// whole (a *ValidationError: "Reservations.ID[0] must be a UUID", the ID a
// Local reservation never has), so its database reservations stayed
// reserved and its leases live: the grant could not be settled at all.
// The database's part must settle, and the Local one be reported as not
// settled on another Limiter (its block charges its estimate when it is
// returned); the Limiter that admitted it settles it by its LocalID (see
// allot_json_test.go).
func TestGrantThatWentThroughJSONSettlesItsDatabasePart(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key, model := uniqueKey("json"), uniqueKey("json-model")
	reserve := func() ratelimit.Grant {
		t.Helper()
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{
			localWindow(hour, key, 1000, 10), window("api_key", key, "requests", 10, 1), concurrent("model", model, 2),
		})
		if err != nil || !g.Reservations[0].Local || g.Reservations[1].Local {
			t.Fatalf("Reserve: %+v, %v; want a Local reservation then a database one", g, err)
		}
		return throughJSON(t, g)
	}
	elsewhere := ratelimit.New(pool)

	committed, err := elsewhere.Commit(ctx, reserve(), map[string]float64{"requests": 1})
	if err != nil {
		t.Fatalf("Commit of a grant decoded from JSON: %v", err)
	}
	want := []ratelimit.ReservationOutcome{
		{Metric: ratelimit.MetricTokens, Status: ratelimit.StatusUnknown, Reserved: 10},
		{ID: committed.Reservations[1].ID, Metric: "requests", Status: ratelimit.StatusCommitted, Settled: true, Reserved: 1, Actual: 1},
	}
	if len(committed.Reservations) != 2 || committed.Reservations[0] != want[0] || committed.Reservations[1] != want[1] || committed.LeasesReleased != 1 {
		t.Fatalf("Commit = %+v, want %+v and one lease released", committed, want)
	}

	released, err := l.Release(ctx, reserve(), "upstream failed")
	if err != nil {
		t.Fatalf("Release of a grant decoded from JSON: %v", err)
	}
	if len(released.Reservations) != 2 || !released.Reservations[0].Settled || released.Reservations[0].Status != ratelimit.StatusReleased ||
		!released.Reservations[1].Settled || released.Reservations[1].Status != ratelimit.StatusReleased || released.LeasesReleased != 1 {
		t.Fatalf("Release = %+v, want the Local reservation released (on the Limiter that admitted it), the database one released, one lease released", released)
	}

	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Worker: "w"}) // sync: created running
	if err != nil {
		t.Fatal(err)
	}
	decoded := reserve()
	if _, err := l.Attach(ctx, task.AttemptID, decoded); err != nil {
		t.Fatalf("Attach of a grant decoded from JSON: %v", err)
	}
	if _, err := l.Release(ctx, decoded, "done"); err != nil {
		t.Fatal(err)
	}

	assertCounter(t, pool, key, "requests", 1, 0)
	if live := liveLeases(t, pool, "model", model); live != 0 {
		t.Fatalf("%d live leases left", live)
	}
	assertBooksBalance(t, pool, "api_key", key)
	l.Close() // returns the blocks, charging the one settled elsewhere at its estimate
	assertBooksBalance(t, pool, "model", key)
	assertDoctorOK(t, pool)
}
