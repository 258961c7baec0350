package ratelimit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// These tests drive the combiner's queue with an operation that records
// its batches; what a batch does in the database is tested in
// combine_batch_test.go.

// gate is an operation whose batches block until released.
type gate struct {
	mu      sync.Mutex
	batches [][]int
	started chan []int
	release chan struct{}
}

func newGate() *gate {
	return &gate{started: make(chan []int, 16), release: make(chan struct{})}
}

func (g *gate) run(_ context.Context, reqs []int) ([]int, []error, error) {
	g.mu.Lock()
	g.batches = append(g.batches, slices.Clone(reqs))
	g.mu.Unlock()
	g.started <- reqs
	<-g.release
	res := make([]int, len(reqs))
	for i, r := range reqs {
		res[i] = r * 10
	}
	return res, make([]error, len(reqs)), nil
}

// A caller alone is sent at once, on its own goroutine; callers who come
// while a batch runs go together, in arrival order, in the next one.
func TestCombinerBatchesWhatArrivesWhileABatchRuns(t *testing.T) {
	g := newGate()
	c := newCombiner(8, 1, g.run, nil)
	results := make(chan [2]int, 8)
	call := func(n int) {
		res, err := c.do(context.Background(), n)
		if err != nil {
			t.Error(err)
		}
		results <- [2]int{n, res}
	}
	go call(1)
	if first := <-g.started; !slices.Equal(first, []int{1}) {
		t.Fatalf("first batch %v, want [1]", first)
	}
	for n := 2; n <= 4; n++ {
		go call(n)
		waitQueued(t, c, n-1)
	}
	g.release <- struct{}{} // batch [1] ends; [2 3 4] starts
	if second := <-g.started; !slices.Equal(second, []int{2, 3, 4}) {
		t.Fatalf("second batch %v, want [2 3 4]", second)
	}
	g.release <- struct{}{}
	got := map[int]int{}
	for range 4 {
		r := <-results
		got[r[0]] = r[1]
	}
	for n := 1; n <= 4; n++ {
		if got[n] != n*10 {
			t.Errorf("request %d got %d, want %d", n, got[n], n*10)
		}
	}
	if s := c.stats(); s.Batches != 2 || s.Requests != 4 {
		t.Errorf("stats %+v, want 2 batches of 4 requests", s)
	}
}

// A weighed combiner's batch takes callers in arrival order while they
// weigh its budget at most: the caller that would pass it goes first in the
// next batch, and one heavier than the whole budget goes alone.
func TestWeighedCombinerBoundsWhatABatchWeighs(t *testing.T) {
	g := newGate()
	c := newCombiner(8, 1, g.run, nil).weighed(10, func(n int) int { return n })
	done := make(chan struct{}, 8)
	call := func(n int) {
		if _, err := c.do(context.Background(), n); err != nil {
			t.Error(err)
		}
		done <- struct{}{}
	}
	go call(1)
	<-g.started
	queued := []int{4, 5, 2, 12, 3, 3, 3}
	for i, n := range queued {
		go call(n)
		waitQueued(t, c, i+1)
	}
	want := [][]int{{4, 5}, {2}, {12}, {3, 3, 3}}
	for _, batch := range want {
		g.release <- struct{}{}
		if got := <-g.started; !slices.Equal(got, batch) {
			t.Fatalf("batch %v, want %v (weights up to 10, in arrival order)", got, batch)
		}
	}
	g.release <- struct{}{}
	for range 1 + len(queued) {
		<-done
	}
}

// A combiner times its statements, from taking a connection to the
// answer: Busy is their sum, so with one in flight it never exceeds the
// time that passed, and each statement adds at least what it took.
func TestCombinerTimesItsStatements(t *testing.T) {
	const statements, pause = 3, 20 * time.Millisecond
	slow := func(_ context.Context, reqs []int) ([]int, []error, error) {
		time.Sleep(pause)
		return reqs, make([]error, len(reqs)), nil
	}
	c := newCombiner(8, 1, slow, nil)
	start := time.Now()
	for n := range statements {
		if _, err := c.do(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	s := c.stats()
	if s.Batches != statements || s.Busy < statements*pause || s.Busy > elapsed {
		t.Errorf("%d statements busy %v in %v; want %d, busy at least %v and at most the time elapsed",
			s.Batches, s.Busy, elapsed, statements, statements*pause)
	}
	if mean := s.MeanStatement(); mean < pause || mean != s.Busy/statements {
		t.Errorf("mean statement %v, want Busy over Batches and at least %v", mean, pause)
	}
	if d := s.Sub(CombinerStats{Batches: 1, Requests: 1, Busy: pause}); d.Batches != statements-1 || d.Busy != s.Busy-pause {
		t.Errorf("Sub gave %+v", d)
	}
	if sum := s.Add(s); sum.Busy != 2*s.Busy || sum.Requests != 2*statements {
		t.Errorf("Add gave %+v", sum)
	}
	// Waiting is a gauge: Sub keeps the later reading's, Add sums.
	if d := (CombinerStats{Waiting: 3}).Sub(CombinerStats{Waiting: 5}); d.Waiting != 3 {
		t.Errorf("Sub gave Waiting %d, want the later reading's 3", d.Waiting)
	}
	if sum := (CombinerStats{Waiting: 3}).Add(CombinerStats{Waiting: 5}); sum.Waiting != 8 {
		t.Errorf("Add gave Waiting %d, want 8", sum.Waiting)
	}
}

// Callers woken together (as the callers of one batch are when it answers)
// ride in one batch: the first one yields to the others before it sends,
// instead of going alone and making the rest wait for it.
func TestCombinerSendsCallersWokenTogetherInOneBatch(t *testing.T) {
	together := 0
	for range 20 {
		var mu sync.Mutex
		var sizes []int
		c := newCombiner(8, 1, func(_ context.Context, reqs []int) ([]int, []error, error) {
			mu.Lock()
			sizes = append(sizes, len(reqs))
			mu.Unlock()
			return make([]int, len(reqs)), make([]error, len(reqs)), nil
		}, nil)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for n := range 8 {
			wg.Go(func() {
				<-start
				if _, err := c.do(context.Background(), n); err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		if s := c.stats(); s.Requests != 8 {
			t.Fatalf("stats %+v, want 8 requests", s)
		}
		if sizes[0] > 1 {
			together++
		}
	}
	// Without the yield the first caller always goes alone; with it, others
	// nearly always join it (the scheduler decides, hence 1 round in 20).
	if together == 0 {
		t.Fatal("in 20 rounds of 8 callers woken together, the first one always went alone")
	}
	t.Logf("the first caller had company in %d of 20 rounds", together)
}

// Callers that the end of a batch wakes (its own callers coming back, or
// those of the other stream's batch, which tends to end at the same time)
// ride in the next batch with those who queued while it ran: that batch is
// sent after yielding to them, not the moment the last one ends.
func TestCombinerNextBatchTakesCallersWokenAsTheLastOneEnds(t *testing.T) {
	together := 0
	for range 20 {
		var mu sync.Mutex
		var sizes []int
		running, proceed, wake := make(chan struct{}), make(chan struct{}), make(chan struct{})
		c := newCombiner(8, 1, func(_ context.Context, reqs []int) ([]int, []error, error) {
			mu.Lock()
			sizes = append(sizes, len(reqs))
			first := len(sizes) == 1
			mu.Unlock()
			if first {
				close(running)
				<-proceed
				close(wake) // as its answer would wake them
			}
			return make([]int, len(reqs)), make([]error, len(reqs)), nil
		}, nil)
		var wg sync.WaitGroup
		call := func(n int) {
			if _, err := c.do(context.Background(), n); err != nil {
				t.Error(err)
			}
		}
		wg.Go(func() { call(0) })
		<-running
		wg.Go(func() { call(1) })
		waitQueued(t, c, 1)
		for n := 2; n < 8; n++ {
			wg.Go(func() {
				<-wake
				call(n)
			})
		}
		close(proceed)
		wg.Wait()
		if s := c.stats(); s.Requests != 8 {
			t.Fatalf("stats %+v, want 8 requests", s)
		}
		if sizes[1] > 1 {
			together++
		}
	}
	// Without the yield the queued caller nearly always goes alone; with it,
	// the woken ones nearly always join it (the scheduler decides).
	if together < 10 {
		t.Fatalf("in %d of 20 rounds the batch after the first took only the caller queued during it", 20-together)
	}
	t.Logf("the queued caller had company in %d of 20 rounds", together)
}

// waitQueued waits until n requests wait in the queue.
func waitQueued(t *testing.T, c *combiner[int, int], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		c.mu.Lock()
		queued := len(c.queue)
		c.mu.Unlock()
		if queued == n {
			return
		}
	}
	t.Fatalf("never saw %d requests queued", n)
}

// wantWaiting fails t unless c's Stats count want calls waiting.
func wantWaiting(t *testing.T, c *combiner[int, int], want int64, when string) {
	t.Helper()
	if got := c.stats().Waiting; got != want {
		t.Fatalf("%s: %d calls waiting, want %d", when, got, want)
	}
}

// A caller whose context ends while it waits in the queue leaves, and its
// request is never sent. One that leaves after its request was sent gets
// its context's error, and what the batch granted it goes to abandoned.
// Stats count a call waiting until it leaves the queue, or, once sent,
// until its statement is answered (CombinerStats.Waiting).
func TestCombinerCallersWhoLeave(t *testing.T) {
	g := newGate()
	abandoned := make(chan int, 4)
	c := newCombiner(8, 1, g.run, func(res int, _ time.Time) { abandoned <- res })

	inFlight, leaveInFlight := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	go func() { _, err := c.do(inFlight, 1); errs <- err }()
	<-g.started
	queued, leaveQueued := context.WithCancel(context.Background())
	go func() { _, err := c.do(queued, 2); errs <- err }()
	waitQueued(t, c, 1)

	wantWaiting(t, c, 2, "one call in flight, one queued")
	leaveQueued()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued caller: %v, want context.Canceled", err)
	}
	wantWaiting(t, c, 1, "the queued caller gone")
	// Request 1, alone, runs on its caller's goroutine: the caller who
	// leaves returns once its statement is answered, with its context's
	// error, and what it was granted goes to abandoned.
	leaveInFlight()
	wantWaiting(t, c, 1, "the caller in flight gone, its statement not answered")
	g.release <- struct{}{}
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("in-flight caller that ran its own batch, after leaving: %v, want context.Canceled", err)
	}
	if res := <-abandoned; res != 10 {
		t.Fatalf("abandoned %d, want 10 (request 1's result)", res)
	}
	wantWaiting(t, c, 0, "its statement answered")

	// Now leave while another goroutine runs the batch.
	three := make(chan error, 1)
	go func() { _, err := c.do(context.Background(), 3); three <- err }()
	<-g.started
	ctx, leave := context.WithCancel(context.Background())
	go func() { _, err := c.do(ctx, 4); errs <- err }()
	waitQueued(t, c, 1)
	wantWaiting(t, c, 2, "[3] in flight, 4 queued")
	g.release <- struct{}{} // [3] ends, [4] is sent
	if got := <-g.started; !slices.Equal(got, []int{4}) {
		t.Fatalf("batch %v, want [4] (request 2 was withdrawn)", got)
	}
	if err := <-three; err != nil {
		t.Fatal(err)
	}
	wantWaiting(t, c, 1, "[4] in flight")
	leave()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller who left a sent request: %v, want context.Canceled", err)
	}
	wantWaiting(t, c, 1, "[4]'s caller gone, its statement not answered")
	g.release <- struct{}{}
	if res := <-abandoned; res != 40 {
		t.Fatalf("abandoned %d, want 40 (request 4's result)", res)
	}
	wantWaiting(t, c, 0, "[4] answered")
	for _, b := range g.batches {
		if slices.Contains(b, 2) {
			t.Fatalf("withdrawn request 2 was sent: %v", g.batches)
		}
	}
}

// A batch that the server refuses as a whole for what it was sent is run
// again one request at a time, so that only the request at fault fails.
// One that fails for any other reason (cancelled, the server shutting
// down) is not: a hot batch may fail so after its first commit, and running
// its requests again would admit them twice.
func TestCombinerIsolatesARequestTheServerRejects(t *testing.T) {
	for _, tc := range []struct {
		code  string
		sizes []int
	}{
		{"22023", []int{1, 3, 1, 1, 1}}, // invalid_parameter_value: the batch of 3, then each alone
		{"23514", []int{1, 3, 1, 1, 1}}, // check_violation
		{"P0001", []int{1, 3, 1, 1, 1}}, // raise_exception
		{"57014", []int{1, 3}},          // query_canceled: every caller gets the error
		{"57P01", []int{1, 3}},          // admin_shutdown
	} {
		t.Run(tc.code, func(t *testing.T) {
			sizes, results, stats := runWithBadRequest(t, tc.code)
			for _, r := range results {
				var pgErr *pgconn.PgError
				retried := len(tc.sizes) > 2
				switch {
				case (r.n == 13 || !retried) && !errors.As(r.err, &pgErr):
					t.Errorf("request %d: %v, want the server's error", r.n, r.err)
				case r.n != 13 && retried && (r.err != nil || r.res != r.n):
					t.Errorf("request %d: %d, %v; want its result", r.n, r.res, r.err)
				}
			}
			if !slices.Equal(sizes, tc.sizes) {
				t.Errorf("batch sizes %v, want %v", sizes, tc.sizes)
			}
			// Each statement counts the calls it carried: a call sent in
			// the rejected batch and then alone counts in both
			// (CombinerStats, pgadmit_combined_calls_total).
			carried := 0
			for _, n := range tc.sizes {
				carried += n
			}
			if stats.Batches != int64(len(tc.sizes)) || stats.Requests != int64(carried) || stats.Waiting != 0 {
				t.Errorf("stats %+v, want %d statements carrying %d calls, none waiting", stats, len(tc.sizes), carried)
			}
		})
	}
}

type badRequestResult struct {
	n, res int
	err    error
}

// runWithBadRequest sends requests 12, 13 and 14 in one batch, to a server
// that fails any batch holding 13 with code, and returns the sizes of the
// batches it ran, each request's result and the combiner's stats.
func runWithBadRequest(t *testing.T, code string) ([]int, []badRequestResult, CombinerStats) {
	var mu sync.Mutex
	var sizes []int
	block := make(chan struct{})
	run := func(_ context.Context, reqs []int) ([]int, []error, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		if reqs[0] == 0 {
			<-block // the first batch holds the queue while the others arrive
		}
		if slices.Contains(reqs, 13) {
			return nil, nil, &pgconn.PgError{Code: code, Message: "bad request 13"}
		}
		return slices.Clone(reqs), make([]error, len(reqs)), nil
	}
	c := newCombiner(8, 1, run, nil)
	done := make(chan struct{})
	go func() { _, _ = c.do(context.Background(), 0); close(done) }()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(sizes)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("first batch never ran")
		}
	}
	results := make(chan badRequestResult, 3)
	for i, n := range []int{12, 13, 14} {
		go func() { res, err := c.do(context.Background(), n); results <- badRequestResult{n, res, err} }()
		waitQueued(t, c, i+1)
	}
	close(block)
	<-done
	var out []badRequestResult
	for range 3 {
		out = append(out, <-results)
	}
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(sizes), out, c.stats()
}

// A batch that panics answers every caller in it with an error, and the
// stream goes on: the next call is sent and answered. Without the guard the
// in-flight place was never given back and every later call waited forever.
func TestCombinerSurvivesABatchThatPanics(t *testing.T) {
	g := newGate()
	c := newCombiner(8, 1, func(ctx context.Context, reqs []int) ([]int, []error, error) {
		if slices.Contains(reqs, 2) {
			panic("boom")
		}
		return g.run(ctx, reqs)
	}, nil)
	type answer struct {
		req int
		err error
	}
	answers := make(chan answer, 3)
	call := func(req int) {
		_, err := c.do(context.Background(), req)
		answers <- answer{req, err}
	}
	go call(1)
	<-g.started
	go call(2)
	go call(3)
	waitQueued(t, c, 2)
	g.release <- struct{}{} // [1] ends; [2 3] is sent, and panics
	for range 3 {
		a := <-answers
		switch {
		case a.req == 1 && a.err != nil:
			t.Errorf("request 1 (a batch of its own): %v", a.err)
		case a.req != 1 && (a.err == nil || !strings.Contains(a.err.Error(), "panicked: boom")):
			t.Errorf("request %d (in the batch that panicked): %v, want an error naming the panic", a.req, a.err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if res, err := c.do(ctx, 4); err != nil || res != 40 {
			t.Errorf("the call after the panic: %d, %v; want 40", res, err)
		}
	}()
	select {
	case <-g.started:
		g.release <- struct{}{}
	case <-ctx.Done():
		t.Fatal("the call after the panic was never sent")
	}
	<-done
}

// A statement whose callers have all left is not cancelled: the server
// may have committed it, and only its answer names what it granted. It
// runs to its answer, which goes to abandoned, while the queue behind it
// goes on; Close (drain) waits for it. Only a statement still unanswered
// leftGrace after its last caller left is cancelled.
func TestCombinerStatementEveryCallerLeftRunsToItsAnswer(t *testing.T) {
	started := make(chan context.Context, 4)
	release := make(chan struct{})
	abandoned := make(chan int, 4)
	c := newCombiner(8, 1, func(ctx context.Context, reqs []int) ([]int, []error, error) {
		started <- ctx
		select {
		case <-release:
			return reqs, make([]error, len(reqs)), nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}, func(res int, _ time.Time) { abandoned <- res })
	c.leftGrace = time.Hour
	errs := make(chan error, 3)

	// A caller alone, stuck (behind a lock, say), leaves: its statement
	// goes on, and the next caller is sent meanwhile.
	first, firstLeaves := context.WithCancel(context.Background())
	go func() { _, err := c.do(first, 1); errs <- err }()
	statement := <-started
	firstLeaves()
	next := make(chan error, 1)
	go func() { _, err := c.do(context.Background(), 2); next <- err }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the next caller waits for a statement nobody waits for")
	}
	if statement.Err() != nil {
		t.Fatal("the statement every caller left was cancelled")
	}
	drained := make(chan struct{})
	go func() { c.drain(); close(drained) }()
	release <- struct{}{}
	release <- struct{}{}
	if err := <-next; err != nil {
		t.Fatalf("the next caller: %v", err)
	}
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller who left: %v, want context.Canceled", err)
	}
	if res := <-abandoned; res != 1 {
		t.Fatalf("abandoned %d, want 1 (the leaver's result)", res)
	}
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatal("drain still waits after every statement was answered")
	}

	// Two callers in one statement: it is cancelled leftGrace after the
	// second left, not when the first did.
	c.leftGrace = 50 * time.Millisecond
	go func() { _, err := c.do(context.Background(), 3); errs <- err }()
	<-started // [3]
	one, oneLeaves := context.WithCancel(context.Background())
	two, twoLeaves := context.WithCancel(context.Background())
	go func() { _, err := c.do(one, 4); errs <- err }()
	go func() { _, err := c.do(two, 5); errs <- err }()
	waitQueued(t, c, 2)
	release <- struct{}{} // [3] ends, [4 5] is sent
	if err := <-errs; err != nil {
		t.Fatalf("request 3: %v", err)
	}
	statement = <-started
	oneLeaves()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first caller who left: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if statement.Err() != nil {
		t.Fatal("the statement was cancelled while a caller still waited for it")
	}
	// Read before the leave: the combiner starts its grace once it sees
	// it, which may come before this goroutine runs again.
	left := time.Now()
	twoLeaves()
	if err := <-errs; !errors.Is(err, context.Canceled) {
		t.Fatalf("the second caller who left: %v", err)
	}
	select {
	case <-statement.Done():
		if waited := time.Since(left); waited < c.leftGrace {
			t.Fatalf("the statement was cancelled %v after its callers left, before leftGrace (%v)", waited, c.leftGrace)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the statement was not cancelled leftGrace after every caller had left")
	}
	c.drain()
	select {
	case res := <-abandoned:
		t.Fatalf("abandoned %d from a statement that was cancelled", res)
	default:
	}
}

// The caller whose call sends a batch of several (it found no batch in
// flight, and others queued) leaves when its context ends, although another
// caller in the batch has no deadline and so the statement goes on: the
// batch runs on a goroutine of its own. It used to run on that caller's,
// which could not leave before the statement ended.
func TestCombinerCallerWhoSendsABatchOfSeveralCanLeave(t *testing.T) {
	g := newGate()
	abandoned := make(chan int, 1)
	c := newCombiner(8, 1, g.run, func(res int, _ time.Time) { abandoned <- res })
	// A caller without a deadline queued already (as one woken with the
	// next is, by the time that one sends).
	other := &combined[int, int]{req: 2, ctx: context.Background(), done: make(chan struct{})}
	c.queue = append(c.queue, other)

	ctx, leave := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { _, err := c.do(ctx, 1); errs <- err }()
	if batch := <-g.started; !slices.Equal(batch, []int{2, 1}) {
		t.Fatalf("batch %v, want [2 1]", batch)
	}
	leave()
	select {
	case err := <-errs:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller who sent the batch, after leaving: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the caller who sent a batch of several cannot leave it")
	}
	g.release <- struct{}{}
	<-other.done
	if res, err := other.answer(); res != 20 || err != nil {
		t.Errorf("the caller who stayed got %d, %v; want 20", res, err)
	}
	if res := <-abandoned; res != 10 {
		t.Errorf("abandoned %d, want 10 (the leaver's result)", res)
	}
}

// A caller whose deadline passes while its statement runs gets
// context.DeadlineExceeded, its own reason, and not the error of the
// statement, cancelled leftGrace after every caller left.
func TestCombinerAnswersALeaverWithItsOwnReason(t *testing.T) {
	c := newCombiner(8, 1, func(ctx context.Context, reqs []int) ([]int, []error, error) {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}, nil)
	c.leftGrace = time.Millisecond
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := c.do(ctx, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("caller past its deadline: %v, want context.DeadlineExceeded", err)
		}
	}
}
