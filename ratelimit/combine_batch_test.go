package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A combined batch decides its admissions in arrival order against a
// running total under one lock: on a counter with room for 10, requests of
// 4, 4, 4 and 1 are admitted, admitted, refused (8 used, 4 more would not
// fit) and admitted (1 still fits). The refused one writes nothing.
func TestCombinedBatchAdmitsInArrivalOrder(t *testing.T) {
	t.Parallel()
	forEachBatchPath(t, testCombinedBatchAdmitsInArrivalOrder)
}

func testCombinedBatchAdmitsInArrivalOrder(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool) {
	ctx := context.Background()
	for _, fresh := range []bool{true, false} { // a counter row the batch creates, then one that exists
		key := uniqueKey("arrival")
		lim := window("api_key", key, "tokens", 10, 0)
		lim.Window = pgtest.WindowWithRoom(t, pool, time.Minute, 5*time.Second) // one counter row: the batch meets the row made before it
		if !fresh {
			lim.Amount = 1
			g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Release(ctx, g, "make the row"); err != nil {
				t.Fatal(err)
			}
		}
		var reqs []ratelimit.BatchRequest
		for _, amount := range []float64{4, 4, 4, 1} {
			lim.Amount = amount
			reqs = append(reqs, ratelimit.BatchRequest{Limits: []ratelimit.Limit{lim}})
		}
		grants, errs, err := l.ReserveCombined(ctx, reqs)
		if err != nil {
			t.Fatalf("fresh=%v: %v", fresh, err)
		}
		var exceeded *ratelimit.ExceededError
		if errs[0] != nil || errs[1] != nil || errs[3] != nil || !errors.As(errs[2], &exceeded) {
			t.Fatalf("fresh=%v: errors %v, want only the third refused", fresh, errs)
		}
		if exceeded.Current != 8 || exceeded.Amount != 4 || !exceeded.Retryable {
			t.Errorf("fresh=%v: refusal %+v, want current 8, amount 4, retryable", fresh, exceeded)
		}
		remaining := []float64{grants[0].Reservations[0].Remaining, grants[1].Reservations[0].Remaining, grants[3].Reservations[0].Remaining}
		if diff := cmp.Diff([]float64{6, 2, 1}, remaining); diff != "" {
			t.Errorf("fresh=%v: remaining after each admission (-want +got):\n%s", fresh, diff)
		}
		rows := counterRows(t, pool, "api_key", key)
		if len(rows) != 1 || rows[0].ReservedValue != 9 {
			t.Fatalf("fresh=%v: counter %+v, want reserved 9", fresh, rows)
		}
		assertBooksBalance(t, pool, "api_key", key)
		if _, err := l.CommitCombined(ctx, []ratelimit.Grant{grants[0], grants[1], grants[3]}); err != nil {
			t.Fatalf("fresh=%v: commit: %v", fresh, err)
		}
		rows = counterRows(t, pool, "api_key", key)
		if len(rows) != 1 || rows[0].UsedValue != 9 || rows[0].ReservedValue != 0 {
			t.Fatalf("fresh=%v: counter after commit %+v, want used 9, reserved 0", fresh, rows)
		}
		assertBooksBalance(t, pool, "api_key", key)
	}
	assertDoctorOK(t, pool)
}

// When what a batch asks of a counter fits whole, one upsert takes it all:
// every admission is admitted, each seeing those before it.
func TestCombinedBatchTakesAWholeFittingBatchAtOnce(t *testing.T) {
	t.Parallel()
	forEachBatchPath(t, testCombinedBatchTakesAWholeFittingBatchAtOnce)
}

func testCombinedBatchTakesAWholeFittingBatchAtOnce(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool) {
	ctx := context.Background()
	hot, cold := uniqueKey("hot"), uniqueKey("cold")
	var reqs []ratelimit.BatchRequest
	for i := range 6 {
		key := hot
		if i%3 == 2 {
			key = cold
		}
		reqs = append(reqs, ratelimit.BatchRequest{Limits: []ratelimit.Limit{window("api_key", key, "requests", 100, 1)}})
	}
	grants, errs, err := l.ReserveCombined(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var remaining []float64
	for i, g := range grants {
		if errs[i] != nil {
			t.Fatalf("admission %d: %v", i, errs[i])
		}
		remaining = append(remaining, g.Reservations[0].Remaining)
	}
	if diff := cmp.Diff([]float64{99, 98, 99, 97, 96, 98}, remaining); diff != "" {
		t.Errorf("remaining after each admission (-want +got):\n%s", diff)
	}
	if _, err := l.CommitCombined(ctx, grants); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]float64{hot: 4, cold: 2} {
		rows := counterRows(t, pool, "api_key", key)
		if len(rows) != 1 || rows[0].UsedValue != want || rows[0].ReservedValue != 0 {
			t.Errorf("%s: counter %+v, want used %g", key, rows, want)
		}
		assertBooksBalance(t, pool, "api_key", key)
	}
}

// One grant committed twice in one batch (a retry racing its original):
// the counter moves once, one call settles it, and the other is told it is
// committed already, as it would be had it waited for the row, not that it
// is still open.
func TestCombinedBatchSettlesOneGrantOnce(t *testing.T) {
	t.Parallel()
	forEachBatchPath(t, testCombinedBatchSettlesOneGrantOnce)
}

func testCombinedBatchSettlesOneGrantOnce(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool) {
	ctx := context.Background()
	key := uniqueKey("twice")
	req := ratelimit.BatchRequest{Limits: []ratelimit.Limit{window("api_key", key, "requests", 100, 1)}}
	grants, errs, err := l.ReserveCombined(ctx, []ratelimit.BatchRequest{req, req})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("ReserveCombined: %v, %v", err, errs)
	}
	if _, err := l.Release(ctx, grants[1], "not needed"); err != nil {
		t.Fatal(err)
	}
	g := grants[0]
	out, err := l.CommitCombined(ctx, []ratelimit.Grant{g, g})
	if err != nil {
		t.Fatal(err)
	}
	settled := 0
	for i, s := range out {
		r := s.Reservations[0]
		if r.Settled {
			settled++
		}
		if r.Status != ratelimit.StatusCommitted || r.Actual != 1 {
			t.Errorf("call %d: %+v, want status committed with actual 1", i, r)
		}
	}
	if settled != 1 {
		t.Errorf("%d calls settled the reservation, want 1: %+v", settled, out)
	}
	if rows := counterRows(t, pool, "api_key", key); len(rows) != 1 || rows[0].UsedValue != 1 || rows[0].ReservedValue != 0 {
		t.Errorf("counter %+v, want used 1, nothing reserved", rows)
	}
	assertBooksBalance(t, pool, "api_key", key)
}

// An admission of several limits in a batch is still all or nothing: one
// whose second limit does not fit writes nothing, and the admissions around
// it on the same counters are decided as if it had never come.
func TestCombinedBatchKeepsEachAdmissionAllOrNothing(t *testing.T) {
	t.Parallel()
	forEachBatchPath(t, testCombinedBatchKeepsEachAdmissionAllOrNothing)
}

func testCombinedBatchKeepsEachAdmissionAllOrNothing(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool) {
	ctx := context.Background()
	key, model := uniqueKey("k"), uniqueKey("m")
	requests := func(amount float64) ratelimit.Limit { return window("api_key", key, "requests", 3, amount) }
	tokens := func(amount float64) ratelimit.Limit { return window("api_key", key, "tokens", 1000, amount) }
	reqs := []ratelimit.BatchRequest{
		{Limits: []ratelimit.Limit{requests(1), tokens(600), concurrent("model", model, 2)}},
		{Limits: []ratelimit.Limit{tokens(600), requests(1)}},                   // tokens would be 1200: refused whole
		{Limits: []ratelimit.Limit{requests(1), concurrent("model", model, 2)}}, // fits: requests 2, slots 2
		{Limits: []ratelimit.Limit{concurrent("model", model, 2)}},              // slots full: refused
		{Limits: []ratelimit.Limit{requests(1)}},                                // requests 3: fits
		{Limits: []ratelimit.Limit{requests(1)}},                                // requests 4: refused
	}
	grants, errs, err := l.ReserveCombined(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range errs {
		var ex *ratelimit.ExceededError
		switch {
		case e == nil:
			got = append(got, "admitted")
		case errors.As(e, &ex):
			got = append(got, "refused "+ex.Metric)
		default:
			got = append(got, e.Error())
		}
	}
	want := []string{"admitted", "refused tokens", "admitted", "refused concurrent", "admitted", "refused requests"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("decisions (-want +got):\n%s", diff)
	}
	reserved := map[string]float64{}
	for _, r := range counterRows(t, pool, "api_key", key) {
		reserved[r.Metric] = r.ReservedValue
	}
	if diff := cmp.Diff(map[string]float64{"requests": 3, "tokens": 600}, reserved); diff != "" {
		t.Errorf("reserved (-want +got):\n%s", diff)
	}
	if n := liveLeases(t, pool, "model", model); n != 2 {
		t.Errorf("live leases = %d, want 2", n)
	}
	assertBooksBalance(t, pool, "api_key", key)

	// Settled together, the admitted three leave their estimates used and
	// their slots free.
	if _, err := l.CommitCombined(ctx, []ratelimit.Grant{grants[0], grants[2], grants[4]}); err != nil {
		t.Fatal(err)
	}
	used := map[string][2]float64{}
	for _, r := range counterRows(t, pool, "api_key", key) {
		used[r.Metric] = [2]float64{r.UsedValue, r.ReservedValue}
	}
	if diff := cmp.Diff(map[string][2]float64{"requests": {3, 0}, "tokens": {600, 0}}, used); diff != "" {
		t.Errorf("used and reserved after commit (-want +got):\n%s", diff)
	}
	if n := liveLeases(t, pool, "model", model); n != 0 {
		t.Errorf("live leases after commit = %d, want 0", n)
	}
	assertBooksBalance(t, pool, "api_key", key)
	assertDoctorOK(t, pool)
}

// Concurrent callers of several Limiters (as several gateway instances)
// are combined, and the limits stay exact: a window of 300 admits exactly
// 300 and a concurrency limit of 7 exactly 7, however the calls were
// batched; and combining did happen.
func TestCombiningIsExactAcrossInstances(t *testing.T) {
	t.Parallel()
	const instances, callers, tries = 3, 24, 25
	pools := pgtest.NewPools(t, instances)
	key, other, model := uniqueKey("exact"), uniqueKey("other"), uniqueKey("slots")
	limiters := make([]*ratelimit.Limiter, instances)
	for i := range limiters {
		limiters[i] = ratelimit.New(pools[i], ratelimit.WithCombining(64, 1))
	}
	grants := reserveConcurrently(t, callers, tries, func(c int) (ratelimit.Grant, error) {
		limits := []ratelimit.Limit{window("api_key", key, "requests", 300, 1)}
		if c%2 == 0 { // two limits: decided with the running totals, not the whole-batch upsert
			limits = []ratelimit.Limit{window("api_key", other, "requests", 1e9, 1), concurrent("model", model, 7)}
		}
		return limiters[c%instances].Reserve(context.Background(), "", "", limits)
	})
	admitted, leased := len(grants), 0
	for _, g := range grants {
		leased += len(g.Leases)
	}
	if admitted != 300+7 {
		t.Errorf("admitted %d, want exactly 300 in the window and 7 holding a slot", admitted)
	}
	if leased != 7 {
		t.Errorf("leases granted %d, want exactly 7", leased)
	}
	var batches, requests, hot int64
	for _, l := range limiters {
		s := l.Stats()
		batches += s.Reserve.Batches
		requests += s.Reserve.Requests
		hot += s.Reserve.Hot
	}
	if requests != callers*tries || batches >= requests {
		t.Errorf("%d Reserve calls went out as %d statements; want fewer statements than calls", requests, batches)
	}
	if hot == 0 {
		t.Errorf("no Reserve statement went as a hot batch; %d callers share two counters", callers)
	}
	t.Logf("%d Reserve calls in %d statements (%.1f per statement, %d hot)", requests, batches, float64(requests)/float64(batches), hot)
	assertBooksBalance(t, pools[0], "api_key", key)
	assertDoctorOK(t, pools[0])
}

// A batch in which two admissions take a slot of one concurrency scope goes
// as a hot batch, which releases the scope's lock before its commit's
// flush: instances that share the scope then wait for each other's
// execution only. The limit stays exact across them, and every slot comes
// back with its release.
func TestSharedConcurrencyScopeGoesHot(t *testing.T) {
	t.Parallel()
	const instances, callers, tries, slots = 3, 24, 10, 7
	pools := pgtest.NewPools(t, instances)
	model := uniqueKey("model")
	limiters := make([]*ratelimit.Limiter, instances)
	for i := range limiters {
		limiters[i] = ratelimit.New(pools[i])
	}
	held := reserveConcurrently(t, callers, tries, func(c int) (ratelimit.Grant, error) {
		return limiters[c%instances].Reserve(context.Background(), "", "", []ratelimit.Limit{concurrent("model", model, slots)})
	})
	if len(held) != slots {
		t.Errorf("granted %d slots, want exactly %d", len(held), slots)
	}
	var hot int64
	for _, l := range limiters {
		hot += l.Stats().Reserve.Hot
	}
	if hot == 0 {
		t.Errorf("no Reserve statement went as a hot batch; %d callers share one concurrency scope", callers)
	}
	for _, g := range held {
		if _, err := limiters[0].Release(context.Background(), g, "test done"); err != nil {
			t.Fatal(err)
		}
	}
	g, err := limiters[1].Reserve(context.Background(), "", "", []ratelimit.Limit{concurrent("model", model, slots)})
	if err != nil || len(g.Leases) != 1 {
		t.Errorf("a slot after every release: %+v, %v", g, err)
	}
	assertDoctorOK(t, pools[0])
}

// reserveConcurrently runs callers goroutines, each calling reserve (with
// its number) tries times, and returns the grants of the admitted calls. A
// refusal is expected; any other error fails the test.
func reserveConcurrently(t *testing.T, callers, tries int, reserve func(caller int) (ratelimit.Grant, error)) []ratelimit.Grant {
	t.Helper()
	var mu sync.Mutex
	var grants []ratelimit.Grant
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tries {
				g, err := reserve(c)
				if errors.Is(err, ratelimit.ErrExceeded) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				grants = append(grants, g)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return grants
}

// pgadmit_reserve_windows, the one statement for batches of task-less
// one-window admissions, decides as pgadmit_reserve does: the same batches,
// sent to each on counters of their own, get the same decisions, report the
// same usage and leave the same counters. The batches are a few fixed
// cases, then random ones near their limits, with limits that differ
// between requests, amounts above the limit and counters the batch creates.
func TestReserveWindowsDecidesAsReserve(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	// Both functions must decide in the same hour and day windows: of an
	// hour and a day, or a few minutes more, each with a minute left.
	hour := int32(hourWindow(t, pool) / time.Second)
	day := int32(pgtest.WindowWithRoom(t, pool, 24*time.Hour, time.Minute) / time.Second)
	ctx := context.Background()
	run := uniqueKey("same")
	batches := [][]oneWindow{
		{{run + "-fits", hour, 10, 4}, {run + "-fits", hour, 12, 5}},                               // whole, at once
		{{run + "-fits", hour, 10, 4}, {run + "-fits", hour, 12, 1}, {run + "-other", hour, 5, 5}}, // one counter whole, one not
		{{run + "-new", hour, 10, 20}, {run + "-new", hour, 14, 20}},                               // a new counter, all refused
		{{run + "-new2", hour, 10, 6}, {run + "-new2", hour, 14, 6}, {run + "-new2", day, 3, 4}},   // a new counter, half admitted
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for round := range 40 {
		var batch []oneWindow
		for range 1 + rng.IntN(12) {
			w := oneWindow{key: fmt.Sprintf("%s-%d", run, rng.IntN(4)), seconds: []int32{hour, day}[rng.IntN(2)],
				limit: float64(8 + rng.IntN(8)), amount: float64(1 + rng.IntN(9))}
			if rng.IntN(3) == 0 {
				w.key = fmt.Sprintf("%s-%d-%d", run, round, rng.IntN(2)) // a counter this batch creates
			}
			if rng.IntN(6) == 0 {
				w.amount += 15 // above every limit
			}
			batch = append(batch, w)
		}
		batches = append(batches, batch)
	}
	keys := map[string]bool{}
	for n, batch := range batches {
		var general db.AdmissionReserveParams
		var one db.AdmissionReserveWindowsParams
		for i, w := range batch {
			keys[w.key] = true
			general.TaskIds = append(general.TaskIds, pgtype.UUID{})
			general.AttemptIds = append(general.AttemptIds, pgtype.UUID{})
			general.WAdmission = append(general.WAdmission, int32(i+1))
			general.WScopeTypes = append(general.WScopeTypes, "general")
			general.WScopeKeys = append(general.WScopeKeys, w.key)
			general.WMetrics = append(general.WMetrics, ratelimit.MetricTokens)
			general.WWindowSeconds = append(general.WWindowSeconds, w.seconds)
			general.WLimitValues = append(general.WLimitValues, w.limit)
			general.WAmounts = append(general.WAmounts, w.amount)
			one.ScopeTypes = append(one.ScopeTypes, "one")
			one.ScopeKeys = append(one.ScopeKeys, w.key)
			one.Metrics = append(one.Metrics, ratelimit.MetricTokens)
			one.WindowSeconds = append(one.WindowSeconds, w.seconds)
			one.LimitValues = append(one.LimitValues, w.limit)
			one.Amounts = append(one.Amounts, w.amount)
		}
		want, err := queries.AdmissionReserve(ctx, pool, general)
		if err != nil {
			t.Fatal(err)
		}
		got, err := queries.AdmissionReserveWindows(ctx, pool, one)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(decisions(want), decisions(got)); diff != "" {
			t.Fatalf("batch %d %+v: decisions differ (-pgadmit_reserve +pgadmit_reserve_windows):\n%s", n, batch, diff)
		}
	}
	for key := range keys {
		want, got := counterRows(t, pool, "general", key), counterRows(t, pool, "one", key)
		if len(want) == 0 {
			t.Fatalf("%s: no counter", key)
		}
		if diff := cmp.Diff(counterState(want), counterState(got)); diff != "" {
			t.Errorf("%s: counters differ (-pgadmit_reserve +pgadmit_reserve_windows):\n%s", key, diff)
		}
		assertBooksBalance(t, pool, "one", key)
	}
}

// oneWindow is an admission of one window limit, on the api_key key.
type oneWindow struct {
	key           string
	seconds       int32
	limit, amount float64
}

// decision is what a caller learns of one admission's window limit.
type decision struct {
	Admission         int32
	Fits, Granted     bool
	Current, Reserved float64
	Refusal           string
}

func decisions[Row db.AdmissionReserveRow | db.AdmissionReserveWindowsRow](rows []Row) []decision {
	out := make([]decision, len(rows))
	for i, row := range rows {
		r := db.AdmissionReserveRow(row)
		out[i] = decision{r.Admission, r.Fits, r.GrantID.Valid, r.CurrentValue, r.ReservedValue, r.Refusal}
	}
	slices.SortFunc(out, func(a, b decision) int { return int(a.Admission - b.Admission) })
	return out
}

// counterState is a counter's amounts and limit, per window length.
func counterState(rows []db.CounterListByScopeRow) map[int32][3]float64 {
	out := map[int32][3]float64{}
	for _, r := range rows {
		out[r.WindowSeconds] = [3]float64{r.UsedValue, r.ReservedValue, r.LimitValue}
	}
	return out
}

// forEachBatchPath runs test, whose batches put several requests on one
// counter, on the paths such a batch can take: the hot batch (committed by
// a procedure that releases the counter before the commit's flush, the
// default), the plain statement (WithoutHotBatches), and the plain
// statement again where pgx sends a batch as one multi-statement query
// (the simple protocol), in which no procedure can commit. It checks which
// path each Limiter took, by its counts of hot statements.
func forEachBatchPath(t *testing.T, test func(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool)) {
	pool := pgtest.NewPool(t)
	cfg := pool.Config()
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	simple, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("simple-protocol pool: %v", err)
	}
	t.Cleanup(simple.Close)
	paths := []struct {
		name string
		conn ratelimit.Executor
		opts []ratelimit.Option
		hot  bool
	}{
		{"hot", pool, nil, true},
		{"cold", pool, []ratelimit.Option{ratelimit.WithoutHotBatches()}, false},
		{"simple protocol", simple, nil, false},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			l := ratelimit.New(p.conn, p.opts...)
			test(t, l, pool)
			s := l.Stats()
			if (s.Reserve.Hot > 0) != p.hot || (s.Settle.Hot > 0) != p.hot {
				t.Errorf("%d reserve and %d settle statements went as hot batches; want some: %v", s.Reserve.Hot, s.Settle.Hot, p.hot)
			}
		})
	}
}

// A caller whose statement is stuck behind a row lock that another
// transaction holds, and who then leaves (its request's context ends), gets
// its statement cancelled: it returns with its context's error (once the
// grace for a statement its callers left is over), admits nothing, and the
// calls queued behind it on other keys go on.
func TestCombinedCallerLeavesAStuckStatement(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	key := uniqueKey("stuck")
	// An hour's window (or a few minutes more) with room left: the holder
	// and the stuck statement meet on one counter row even when a minute
	// ends between them.
	limit := hourLimits(t, pool, window("api_key", key, "requests", 100, 1))[0]
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := l.WithTx(tx).Reserve(ctx, "", "", []ratelimit.Limit{limit}); err != nil { // holds the counter row
		t.Fatal(err)
	}
	call, leave := context.WithCancel(ctx)
	stuck := make(chan error, 1)
	go func() { _, err := l.Reserve(call, "", "", []ratelimit.Limit{limit}); stuck <- err }()
	pgtest.AwaitLockWaiters(t, pool, "the combined statement")
	other := make(chan error, 1)
	go func() {
		_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", uniqueKey("other"), "requests", 100, 1)})
		other <- err
	}()

	leave()
	select {
	case err := <-stuck:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller who left: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller who left still waits for the row lock")
	}
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("the call queued behind it, on another key: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call queued behind it, on another key, still waits")
	}
	pgtest.AwaitNoLockWaiters(t, pool, "the statement its caller left")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range counterRows(t, pool, "api_key", key) {
		if c.UsedValue != 0 || c.ReservedValue != 0 {
			t.Errorf("counter %+v: the cancelled statement admitted something", c)
		}
	}
	assertBooksBalance(t, pool, "api_key", key)
}

// A combined batch that the server rejects for one admission's foreign key
// (its task was deleted while the batch ran, after the task guard let it
// pass) is run again one admission at a time, as for any constraint it
// broke: the admission at fault is told its task is unknown, and the other
// one, on a key of its own, is admitted. The whole batch used to fail with
// ErrUnknownTask, since the error that wrapDBError made of the violation no
// longer carried the server's error for rejectedInput to see.
func TestCombinedBatchIsolatesAnAdmissionWhoseTaskVanished(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	v := stageVanishingTask(t, l, pool)

	type result struct {
		g   ratelimit.Grant
		err error
	}
	ofTask, other := make(chan result, 1), make(chan result, 1)
	go func() {
		g, err := l.Reserve(ctx, v.task.ID, "", []ratelimit.Limit{window("api_key", uniqueKey("task"), "requests", 100, 1)})
		ofTask <- result{g, err}
	}()
	awaitQueuedReserves(t, l, 1, "the task's Reserve")
	otherKey := uniqueKey("other")
	go func() {
		g, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", otherKey, "requests", 100, 1)})
		other <- result{g, err}
	}()
	awaitQueuedReserves(t, l, 2, "the other Reserve")
	v.unblock("the batch of two")
	v.vanish()

	if r := <-ofTask; !errors.Is(r.err, ratelimit.ErrUnknownTask) {
		t.Errorf("the admission of the deleted task: %v, want ErrUnknownTask", r.err)
	}
	if r := <-other; r.err != nil {
		t.Errorf("the admission on a key of its own, batched with it: %v, want admitted", r.err)
	} else if len(r.g.Reservations) != 1 {
		t.Errorf("the admission on a key of its own: grant %+v", r.g)
	}
	if s := l.Stats().Reserve; s.Batches < 2 {
		t.Errorf("stats %+v", s)
	}
	assertBooksBalance(t, pool, "api_key", otherKey)
}

// vanishingTask stages a combined batch whose task disappears while it
// waits: a statement in flight, stuck behind a row lock that a transaction
// holds, so that the callers queued next go together in one batch; and a
// transaction that has finished and pruned task, not yet committed.
type vanishingTask struct {
	t      *testing.T
	pool   *pgxpool.Pool
	task   ratelimit.Task
	holder pgx.Tx
	pruner pgx.Tx
	stuck  chan error
}

func stageVanishingTask(t *testing.T, l *ratelimit.Limiter, pool *pgxpool.Pool) *vanishingTask {
	t.Helper()
	ctx := context.Background()
	v := &vanishingTask{t: t, pool: pool, task: startSync(t, l, time.Minute), stuck: make(chan error, 1)}
	// An hour's window (or a few minutes more) with room left: the holder
	// and the stuck statement meet on one counter row even when a minute
	// ends between them.
	blocker := hourLimits(t, pool, window("api_key", uniqueKey("blocker"), "requests", 100, 1))
	var err error
	if v.holder, err = pool.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.holder.Rollback(ctx) })
	if _, err := l.WithTx(v.holder).Reserve(ctx, "", "", blocker); err != nil {
		t.Fatal(err)
	}
	go func() { _, err := l.Reserve(ctx, "", "", blocker); v.stuck <- err }()
	pgtest.AwaitLockWaiters(t, pool, "the first statement")

	if v.pruner, err = pool.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.pruner.Rollback(ctx) })
	if _, err := testq.OpsTaskCorruptStatus(ctx, v.pruner, dbtest.OpsTaskCorruptStatusParams{Status: "succeeded", TaskID: mustUUID(t, v.task.ID)}); err != nil {
		t.Fatal(err)
	}
	if n, err := queries.PruneTasks(ctx, v.pruner, db.PruneTasksParams{Cutoff: time.Now().Add(time.Hour), BatchSize: 10}); err != nil || n != 1 {
		t.Fatalf("PruneTasks: %d, %v", n, err)
	}
	return v
}

// unblock lets the stuck statement go, and waits until the batch queued
// behind it (batch names it) waits for the task row: its foreign key check.
func (v *vanishingTask) unblock(batch string) {
	v.t.Helper()
	if err := v.holder.Rollback(context.Background()); err != nil {
		v.t.Fatal(err)
	}
	if err := <-v.stuck; err != nil {
		v.t.Fatalf("the first statement: %v", err)
	}
	pgtest.AwaitLockWaiters(v.t, v.pool, batch)
}

// vanish commits the task's pruning, which breaks the waiting batch.
func (v *vanishingTask) vanish() {
	v.t.Helper()
	if err := v.pruner.Commit(context.Background()); err != nil {
		v.t.Fatal(err)
	}
}

// awaitQueuedReserves waits until n Reserve calls wait in l's combiner
// queue; what names the last of them.
func awaitQueuedReserves(t *testing.T, l *ratelimit.Limiter, n int, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); l.QueuedReserves() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never queued", what)
		}
	}
}

// Close waits for the combined statements in flight and for the release of
// what they granted callers who had left, so that a process that closes
// its Limiter and then its pool gives that capacity back. It used to
// return at once: the release ran after the statement, on a pool that the
// process was closing, and the grant stayed held until its window ended.
func TestCloseWaitsForWhatACallerWhoLeftWasGranted(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, ratelimit.WithCombining(8, 1))
	ctx := context.Background()
	first, second := uniqueKey("first"), uniqueKey("second")
	limitsOf := map[string][]ratelimit.Limit{
		first:  hourLimits(t, pool, window("api_key", first, "requests", 100, 1)),
		second: hourLimits(t, pool, window("api_key", second, "requests", 100, 1)),
	}
	hold := func(key string) pgx.Tx { // a transaction holding key's counter row
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		if _, err := l.WithTx(tx).Reserve(ctx, "", "", limitsOf[key]); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	holdFirst, holdSecond := hold(first), hold(second)
	reserve := func(ctx context.Context, key string, errs chan<- error) {
		_, err := l.Reserve(ctx, "", "", limitsOf[key])
		errs <- err
	}

	// A statement stuck on the first key holds the one place in flight;
	// two callers on the second key queue behind it and then go together,
	// to be stuck in turn.
	stuck, left, stayed := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go reserve(ctx, first, stuck)
	pgtest.AwaitLockWaiters(t, pool, "the first statement")
	call, leave := context.WithCancel(ctx)
	go reserve(call, second, left)
	awaitQueuedReserves(t, l, 1, "the caller who will leave")
	go reserve(ctx, second, stayed)
	awaitQueuedReserves(t, l, 2, "the caller who stays")
	if err := holdFirst.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stuck; err != nil {
		t.Fatalf("the first statement: %v", err)
	}
	pgtest.AwaitLockWaiters(t, pool, "the batch of two")
	leave()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller who left: %v, want context.Canceled", err)
	}

	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a combined statement was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	if err := holdSecond.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits after the statement ended")
	}
	// Right after Close: the grant of the caller who left is given back,
	// the one of the caller who stayed is held.
	for _, c := range counterRows(t, pool, "api_key", second) {
		if c.UsedValue != 0 || c.ReservedValue != 1 {
			t.Errorf("counter %+v after Close: want reserved 1 (the caller who stayed), used 0", c)
		}
	}
	if err := <-stayed; err != nil {
		t.Fatalf("the caller who stayed: %v", err)
	}
	assertBooksBalance(t, pool, "api_key", second)
}

// Callers who leave before their request is sent are dropped from the
// combiner's queue once they are most of it, instead of when their turn
// comes: behind a statement that stays stuck (its caller has no deadline),
// the queue would otherwise hold every caller who came and left meanwhile.
func TestCombinerQueueDropsCallersWhoLeftUnsent(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	l := ratelimit.New(pool, ratelimit.WithCombining(8, 1))
	ctx := context.Background()
	key := uniqueKey("stuck")
	limits := []ratelimit.Limit{window("api_key", key, "requests", 1000, 1)}
	limits[0].Window = ratelimit.MaxWindow // every Reserve meets on one counter row, whenever the minute ends
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := l.WithTx(holder).Reserve(ctx, "", "", limits); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() { _, err := l.Reserve(ctx, "", "", limits); stuck <- err }()
	pgtest.AwaitLockWaiters(t, pool, "the stuck statement")

	const callers = 500
	call, leave := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Reserve(call, "", "", limits); !errors.Is(err, context.Canceled) {
				t.Errorf("a caller who left: %v, want context.Canceled", err)
			}
		}()
	}
	awaitQueuedReserves(t, l, callers, "every caller")
	leave()
	wg.Wait()
	if n := l.QueuedReserves(); n >= callers/2 {
		t.Errorf("%d of the %d callers who left are still queued behind the stuck statement", n, callers)
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stuck; err != nil {
		t.Fatalf("the stuck statement: %v", err)
	}
	if _, err := l.Reserve(ctx, "", "", limits); err != nil {
		t.Fatalf("a Reserve after: %v", err)
	}
	for _, c := range counterRows(t, pool, "api_key", key) {
		if c.ReservedValue != 2 {
			t.Errorf("counter %+v: want 2 reserved (the stuck statement's and the one after), nothing of the callers who left", c)
		}
	}
}

// A combined batch that the server rejects as a whole is run again one
// request at a time, but not the requests whose callers left meanwhile:
// those were withdrawn, as a request not yet sent is. On a counter with
// room for one, a caller who left while the batch waited (for the row of
// a task being deleted, which then breaks the batch's foreign key) used
// to be admitted again on its own, its grant then released as abandoned,
// and the caller behind it on the counter could be refused for it.
func TestCombinedBatchRunAgainLeavesOutCallersWhoLeft(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	shared := hourLimits(t, pool, window("api_key", uniqueKey("shared"), "requests", 1, 1))
	v := stageVanishingTask(t, l, pool)

	leaver, stayer, ofTask := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	call, leave := context.WithCancel(ctx)
	defer leave()
	go func() { _, err := l.Reserve(call, "", "", shared); leaver <- err }()
	awaitQueuedReserves(t, l, 1, "the caller who will leave")
	go func() { _, err := l.Reserve(ctx, "", "", shared); stayer <- err }()
	awaitQueuedReserves(t, l, 2, "the caller who stays")
	go func() {
		_, err := l.Reserve(ctx, v.task.ID, "", []ratelimit.Limit{window("api_key", uniqueKey("task"), "requests", 100, 1)})
		ofTask <- err
	}()
	awaitQueuedReserves(t, l, 3, "the task's Reserve")
	v.unblock("the batch of three")
	leave()
	if err := <-leaver; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller who left: %v, want context.Canceled", err)
	}
	before := rowCounts(t, pool).Reservations
	v.vanish()

	if err := <-ofTask; !errors.Is(err, ratelimit.ErrUnknownTask) {
		t.Errorf("the admission of the deleted task: %v, want ErrUnknownTask", err)
	}
	if err := <-stayer; err != nil {
		t.Errorf("the caller who stayed, on the counter's one unit: %v, want admitted", err)
	}
	l.Close() // any release of what the caller who left was granted has landed
	if n := rowCounts(t, pool).Reservations - before; n != 1 {
		t.Errorf("%d reservations written after the batch failed, want 1 (the caller who stayed)", n)
	}
	assertBooksBalance(t, pool, "api_key", shared[0].Scope.Key)
}
