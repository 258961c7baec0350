package ratelimit_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A MaxShare above 1 is 1, a block of up to the whole limit: a request of
// half the limit is admitted from a block. It used to take the default
// (1/16), so asking for larger blocks gave smaller ones and this request
// was decided in the database. Zero, a negative share and NaN take the
// default.
func TestLocalMaxShareAboveOneIsOne(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	awaitLocalWindow(t, pool)
	ctx := context.Background()
	for _, c := range []struct {
		share float64
		local bool
	}{
		{1, true}, {2, true}, {math.Inf(1), true},
		{0, false}, {-1, false}, {math.NaN(), false},
	} {
		t.Run(fmt.Sprint(c.share), func(t *testing.T) {
			l := ratelimit.New(pool, ratelimit.WithAllotments(ratelimit.AllotmentOptions{MaxShare: c.share}))
			defer l.Close()
			g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{localWindow(uniqueKey("maxshare"), 1000, 500)})
			if err != nil {
				t.Fatal(err)
			}
			if got := g.Reservations[0].Local; got != c.local {
				t.Errorf("MaxShare %v: a request of half the limit admitted from a block: %v, want %v", c.share, got, c.local)
			}
			if _, err := l.Commit(ctx, g, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
