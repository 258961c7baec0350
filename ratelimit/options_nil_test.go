package ratelimit_test

import (
	"context"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A nil Option or MaintenanceOption (an option variable left unset, say)
// sets nothing: New and NewMaintenance used to panic calling it.
func TestNilOptionsSetNothing(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	ctx := context.Background()
	var unset ratelimit.Option
	l := ratelimit.New(pool, unset, ratelimit.WithoutCombining(), nil)
	defer l.Close()
	key := uniqueKey("nilopt")
	g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "requests", 10, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(ctx, g, nil); err != nil {
		t.Fatal(err)
	}
	if rows := counterRows(t, pool, "api_key", key); len(rows) != 1 || rows[0].UsedValue != 1 {
		t.Fatalf("counter %+v, want used 1", rows)
	}
	var unsetM ratelimit.MaintenanceOption
	if r, err := ratelimit.NewMaintenance(pool, unsetM, ratelimit.WithPruneEvents(true)).Doctor(ctx); err != nil || !r.OK() {
		t.Fatalf("Doctor: %v, %v", r, err)
	}
}
