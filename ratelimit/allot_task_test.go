package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// Reserve fences an admission to its task and attempt whatever its limits:
// one whose limits are all Local and fit a block this process holds is
// admitted from the block for a running attempt, and refused for a finished
// task or attempt (ErrTaskFinished) or one that names no row
// (ErrUnknownTask), with what it took from the block given back: once all
// is settled and the Limiter closed, the counter holds what was admitted.
func TestLocalReserveIsFencedToItsTask(t *testing.T) {
	t.Parallel()
	l, pool, hour := localLimiter(t)
	ctx := context.Background()
	key := uniqueKey("localtask")
	admitted := []ratelimit.Grant{reserveLocal(t, l, hour, key, 1000, 1)} // a block with room is held
	finished, live := startSync(t, l, time.Minute), startSync(t, l, time.Minute)
	g, err := l.Reserve(ctx, finished.ID, finished.AttemptID, []ratelimit.Limit{localWindow(hour, key, 1000, 1)})
	if err != nil || !g.Reservations[0].Local || g.TaskID != finished.ID || g.AttemptID != finished.AttemptID {
		t.Fatalf("Reserve of a Local limit for a running attempt = %+v, %v; want a Local admission of its task", g, err)
	}
	admitted = append(admitted, g)
	if _, err := l.FinishTask(ctx, finished.ID, finished.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded}); err != nil {
		t.Fatal(err)
	}

	const unknown = "123e4567-e89b-12d3-a456-426614174000"
	for _, c := range []struct {
		name, task, attempt string
		want                error
	}{
		{"finished task", finished.ID, "", ratelimit.ErrTaskFinished},
		{"finished attempt", finished.ID, finished.AttemptID, ratelimit.ErrTaskFinished},
		{"unknown task", unknown, "", ratelimit.ErrUnknownTask},
		{"unknown attempt", live.ID, unknown, ratelimit.ErrUnknownTask},
	} {
		if last := admitted[len(admitted)-1].Reservations[0]; last.Remaining < 2 {
			t.Fatalf("%s: the block has %g left, too little for an admission of 2 from it", c.name, last.Remaining)
		}
		if g, err := l.Reserve(ctx, c.task, c.attempt, []ratelimit.Limit{localWindow(hour, key, 1000, 2)}); !errors.Is(err, c.want) {
			t.Errorf("%s: Reserve of a Local limit = %+v, %v; want %v", c.name, g, err, c.want)
		}
		admitted = append(admitted, reserveLocal(t, l, hour, key, 1000, 1))
	}

	want := 0.0
	for _, g := range admitted {
		amount := g.Reservations[0].Amount
		want += amount
		if _, err := l.Commit(ctx, g, map[string]float64{ratelimit.MetricTokens: amount}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	assertBooksBalance(t, pool, "model", key)
	if rows := counterRows(t, pool, "model", key); rows[0].UsedValue != want || rows[0].ReservedValue != 0 {
		t.Fatalf("counter %+v after Close, want used %g (the refused admissions' units given back), reserved 0", rows[0], want)
	}
}
