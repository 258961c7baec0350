package ratelimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The steps that a run's line knows feed its counts (Describe) are the steps Recover and Prune
// run, by the names they report: a step added or renamed without its counts mapped would have its
// failure named at the line's end, but its counts said as 0 (or a count it alone feeds said as 0
// after a failure of a step that does not feed it).
func TestDescribeKnowsEveryStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	ran := map[string][]string{}
	maint := ratelimit.NewMaintenance(pool, ratelimit.WithPruneEvents(true), ratelimit.WithProgress(0, func(p ratelimit.Progress) {
		if !slices.Contains(ran[p.Job], p.Step) {
			ran[p.Job] = append(ran[p.Job], p.Step)
		}
	}))
	if _, err := maint.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := maint.Prune(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"recover", "prune"} {
		known := ratelimit.DescribedSteps(job)
		slices.Sort(known)
		slices.Sort(ran[job])
		if len(known) == 0 || !slices.Equal(known, ran[job]) {
			t.Errorf("%s's line knows the steps %q, the run ran %q", job, known, ran[job])
		}
	}
}
