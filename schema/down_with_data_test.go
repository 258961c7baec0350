package schema_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// TestEachDownRestoresTheCatalogWithDataPresent migrates a fresh database up one migration at
// a time, recording the catalog at every version; writes live data through the library at the
// latest version; then goes down one migration at a time to 0, checking that each Down runs
// with that data present and leaves the catalog exactly as the same version's Up did. It ends
// by migrating up again and asking Doctor about what survived.
func TestEachDownRestoresTheCatalogWithDataPresent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	p, err := schema.NewProvider(stdlib.OpenDBFromPool(pool))
	if err != nil {
		t.Fatalf("provider: %v", err)
	}
	defer p.Close()

	up := map[int64][]dbtest.SchemaFingerprintRow{0: fingerprint(t, pool)}
	if len(up[0]) != 0 {
		t.Fatalf("version 0 has schema objects: %v", up[0])
	}
	previous := up[0]
	for _, src := range p.ListSources() {
		if _, err := p.UpByOne(ctx); err != nil {
			t.Fatalf("up %s: %v", src.Path, err)
		}
		up[src.Version] = fingerprint(t, pool)
		// Every migration changes the catalog: a fingerprint blind to what one did would
		// also be blind to a Down that failed to undo it.
		if reflect.DeepEqual(up[src.Version], previous) {
			t.Fatalf("up %s: the catalog fingerprint did not change", src.Path)
		}
		previous = up[src.Version]
	}
	writeLiveData(t, pool)

	sources := p.ListSources()
	for i := len(sources) - 1; i >= 0; i-- {
		if _, err := p.Down(ctx); err != nil {
			t.Fatalf("down %s with data present: %v", sources[i].Path, err)
		}
		var below int64
		if i > 0 {
			below = sources[i-1].Version
		}
		assertSameCatalog(t, sources[i].Path, below, up[below], fingerprint(t, pool))
	}

	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("up again: %v", err)
	}
	assertState(t, pool, len(sources))
	report, err := ratelimit.NewMaintenance(pool).Doctor(ctx)
	if err != nil {
		t.Fatalf("Doctor after down and up: %v", err)
	}
	if !report.OK() {
		t.Fatalf("Doctor after down and up:\n%s", report)
	}
}

// fingerprint reads the catalog of pgadmit's schema objects.
func fingerprint(t *testing.T, pool *pgxpool.Pool) []dbtest.SchemaFingerprintRow {
	t.Helper()
	rows, err := testq.SchemaFingerprint(context.Background(), pool)
	if err != nil {
		t.Fatalf("SchemaFingerprint: %v", err)
	}
	return rows
}

// assertSameCatalog reports every object that the Down of migration added, removed or changed
// compared with what the Up to version below had left.
func assertSameCatalog(t *testing.T, migration string, below int64, want, got []dbtest.SchemaFingerprintRow) {
	t.Helper()
	type key struct{ kind, name string }
	index := func(rows []dbtest.SchemaFingerprintRow) map[key]string {
		m := make(map[key]string, len(rows))
		for _, r := range rows {
			m[key{r.Kind, r.Name}] = r.Detail
		}
		return m
	}
	w, g := index(want), index(got)
	for k, wd := range w {
		gd, ok := g[k]
		switch {
		case !ok:
			t.Errorf("down %s: %s %s of version %d is missing", migration, k.kind, k.name, below)
		case gd != wd:
			t.Errorf("down %s: %s %s differs from version %d:\n got: %s\nwant: %s", migration, k.kind, k.name, below, gd, wd)
		}
	}
	for k, gd := range g {
		if _, ok := w[k]; !ok {
			t.Errorf("down %s: %s %s is left over, not in version %d: %s", migration, k.kind, k.name, below, gd)
		}
	}
}

// writeLiveData writes through the library what a running gateway leaves in the tables:
// settled and open reservations, a live lease, a running task with an attempt and events, a
// finished task, and an open block of a Local limit.
func writeLiveData(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	l := ratelimit.New(pool)
	t.Cleanup(l.Close)
	key := ratelimit.Scope{Type: "api_key", Key: "migdata"}
	limits := []ratelimit.Limit{
		{Scope: key, Metric: ratelimit.MetricRequests, Limit: 100, Amount: 1},
		{Scope: key, Metric: ratelimit.MetricTokens, Limit: 10_000, Amount: 500},
		{Scope: ratelimit.Scope{Type: "model", Key: "migdata"}, Metric: ratelimit.MetricConcurrent, Limit: 5, Amount: 1},
	}
	settled, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Commit(ctx, settled, map[string]float64{ratelimit.MetricTokens: 420}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	released, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Release(ctx, released, "client_cancelled"); err != nil {
		t.Fatalf("Release: %v", err)
	}

	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "chat", Worker: "w-migdata", LeaseTTL: time.Minute,
		Payload:     json.RawMessage(`{"model":"m"}`),
		QueueLimits: []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "queue", Key: "migdata"}, Metric: ratelimit.MetricQueueSize, Limit: 10}}})
	if err != nil {
		t.Fatalf("CreateTask: %v", err)
	}
	if _, err := l.AppendEvent(ctx, task.ID, task.ExecutionToken, ratelimit.Event{Type: "progress", Phase: "upstream", Progress: 0.5, Message: "half"}); err != nil {
		t.Fatalf("AppendEvent: %v", err)
	}
	if _, err := l.Reserve(ctx, task.ID, task.AttemptID, limits); err != nil { // left open, with its lease
		t.Fatalf("Reserve for the task: %v", err)
	}

	done, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "batch"})
	if err != nil {
		t.Fatalf("CreateTask(async): %v", err)
	}
	claimed, err := l.ClaimTask(ctx, "w-migdata", time.Minute)
	if err != nil || claimed.ID != done.ID {
		t.Fatalf("ClaimTask = %s, %v; want %s", claimed.ID, err, done.ID)
	}
	if _, err := l.FinishTask(ctx, claimed.ID, claimed.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorCode: "upstream", ErrorMessage: "502"}); err != nil {
		t.Fatalf("FinishTask: %v", err)
	}

	// An hour or a few minutes more, with a minute left: a block taken in the last Margin
	// (100 ms) of its window admits nothing and goes back when the window ends, at once.
	hour := pgtest.WindowWithRoom(t, pool, time.Hour, time.Minute)
	local := []ratelimit.Limit{{Scope: key, Metric: ratelimit.MetricRequests, Limit: 1000, Amount: 1, Window: hour, Local: true}}
	if _, err := l.Reserve(ctx, "", "", local); err != nil { // takes a block, left open
		t.Fatalf("Reserve(Local): %v", err)
	}

	counts, err := testq.TableRowCounts(ctx, pool)
	if err != nil {
		t.Fatalf("TableRowCounts: %v", err)
	}
	if counts.Reservations < 5 || counts.Leases < 3 || counts.Attempts < 2 || counts.Events < 1 || counts.Admissions < 1 {
		t.Fatalf("live data not written as planned: %+v", counts)
	}
	blocks, err := testq.AllotmentListByScope(ctx, pool, dbtest.AllotmentListByScopeParams{ScopeType: key.Type, ScopeKey: key.Key})
	if err != nil || len(blocks) != 1 || blocks[0].ReturnedAt != nil {
		t.Fatalf("AllotmentListByScope = %+v, %v; want one open block", blocks, err)
	}
}
