package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Every call of a request's life given a context that ends 0-3 ms after it
// starts (a client that disconnects, a deadline), on four gateway
// instances (pools set up with ConfigurePool; one combines nothing, one
// runs two batches in flight), while each Limiter is closed now and then
// under the calls: Reserve (window limits on a hot counter, per key and
// Local, a concurrency limit), RenewLeases, ReleaseLeases, Commit, Release,
// CreateTask, Attach, FinishTask, and Reserve and Commit inside a caller's
// transaction. A caller told its context's error by a call that settles
// (Commit, Release, ReleaseLeases, Attach, FinishTask) tries once more
// with a context that does not end, and learns what the first call did;
// one told so by Reserve or CreateTask holds nothing. Some callers keep
// what they were granted (their process "dies"). Once the Limiters are
// closed: each counter used exactly what the callers committed (a Local
// counter also what its kept admissions were charged on Close), the open
// reservations, unreleased leases and running tasks are exactly those
// kept, every counter equals its ledger and the doctor is satisfied; after
// Recover and Prune past the windows and TTLs nothing is held.
// TestCallersLeavingAtRandomOnConfiguredPools does this for Reserve alone,
// with callers that settle with contexts that never end;
// TestEveryFlowAtOnce for every flow with no context ending.
func TestCallsCancelledAtAnyMomentLeaveNothingUnknownHeld(t *testing.T) {
	t.Parallel()
	const seed = 42
	base := pgtest.NewPool(t)
	var cancels countedCancels
	pools := make([]*pgxpool.Pool, gatewayInstances)
	ls := make([]*ratelimit.Limiter, gatewayInstances)
	for i := range pools {
		pools[i], _ = slowDials(t, base, 0, func(cfg *pgxpool.Config) {
			ratelimit.ConfigurePool(cfg)
			cancels.configure(cfg)
		})
		var opts []ratelimit.Option
		switch i {
		case 1:
			opts = append(opts, ratelimit.WithoutCombining())
		case 2:
			opts = append(opts, ratelimit.WithCombining(8, 2), ratelimit.WithLeftStatementGrace(10*time.Millisecond))
		}
		ls[i] = ratelimit.New(pools[i], opts...)
	}

	hour := hourWindow(t, base) // an hour or a few minutes more, with a minute left
	hourly := func(l ratelimit.Limit) ratelimit.Limit { l.Window = hour; return l }
	hot := hourly(window("provider", uniqueKey("hot"), "tokens", 1e7, 10))
	keys := []string{uniqueKey("key"), uniqueKey("key"), uniqueKey("key")}
	model := uniqueKey("model")
	slots := concurrent("model", model, 40)
	slots.LeaseTTL = time.Hour
	scopes := [][2]string{{"provider", hot.Scope.Key}}
	for _, key := range keys {
		scopes = append(scopes, [2]string{"api_key", key})
	}
	ctxErr := func(err error) bool {
		return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
	}

	var mu sync.Mutex
	committed := map[string]float64{}  // "type:key metric" -> actual amounts the callers were told committed
	keptLocal := map[string]float64{}  // Local estimates kept open (charged on Close)
	localLoose := map[string]float64{} // Local estimates whose charge the callers cannot know (see below)
	var keptReservations, keptLeases, keptTasks int64
	var calls, ended, retried atomic.Int64
	scopeOf := func(r ratelimit.Reservation) string { return r.ScopeType + ":" + r.ScopeKey + " " + r.Metric }

	// record books a settlement of g to want (committed or released), the
	// first call's or the one tried again after it, which reports what the
	// first did to what it reached (Settled false). A Local reservation
	// whose block went back while it was in flight (a Close) was charged
	// its estimate: committed, whatever this call says.
	record := func(g ratelimit.Grant, s ratelimit.Settlement, want string, leasesBefore int) error {
		if len(s.Reservations) != len(g.Reservations) || s.LeasesReleased+s.LeasesAlreadyReleased != len(g.Leases) {
			return fmt.Errorf("settlement %+v of grant %+v: not every reservation and lease reported", s, g)
		}
		if s.LeasesAlreadyReleased < leasesBefore {
			return fmt.Errorf("settlement %+v: %d leases were released before it", s, leasesBefore)
		}
		mu.Lock()
		defer mu.Unlock()
		for i, o := range s.Reservations {
			r := g.Reservations[i]
			switch {
			case o.Status == want:
			case r.Local && o.Status == ratelimit.StatusCommitted && o.Actual == r.Amount:
			default:
				return fmt.Errorf("reservation %d of grant %+v: %+v, want %s", i, g, o, want)
			}
			if o.Status == ratelimit.StatusCommitted {
				committed[scopeOf(r)] += o.Actual
			}
		}
		return nil
	}
	keep := func(g ratelimit.Grant, leasesReleased bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range g.Reservations {
			if r.Local {
				keptLocal[scopeOf(r)] += r.Amount
			} else {
				keptReservations++
			}
		}
		if !leasesReleased {
			keptLeases += int64(len(g.Leases))
		}
	}
	// loose notes the Local limits of a Reserve that failed or whose
	// grant was released: a Close that returned the block first charged
	// their estimates.
	loose := func(limits []ratelimit.Limit) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range limits {
			if l.Local {
				localLoose[l.Scope.Type+":"+l.Scope.Key+" "+l.Metric] += l.Amount
			}
		}
	}

	// settle commits or releases g with ctx, and once more with a context
	// that does not end when ctx ended first.
	settle := func(l *ratelimit.Limiter, ctx context.Context, g ratelimit.Grant, commit bool, tokens float64, leasesBefore int) error {
		want := ratelimit.StatusReleased
		call := func(ctx context.Context) (ratelimit.Settlement, error) {
			return l.Release(ctx, g, "client_cancelled")
		}
		if commit {
			want = ratelimit.StatusCommitted
			call = func(ctx context.Context) (ratelimit.Settlement, error) {
				return l.Commit(ctx, g, map[string]float64{"tokens": tokens})
			}
		}
		s, err := call(ctx)
		if ctxErr(err) && ctx.Err() != nil {
			retried.Add(1)
			s, err = call(context.Background())
		} else if err == nil {
			for i, o := range s.Reservations {
				if !o.Settled && !g.Reservations[i].Local {
					return fmt.Errorf("first settlement %+v of grant %+v: reservation %d not settled by it", s, g, i)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("settling: %w", err)
		}
		if !commit {
			loose(limitsOf(g))
		}
		return record(g, s, want, leasesBefore)
	}

	stop := make(chan struct{})
	closerDone := make(chan struct{})
	var closes atomic.Int64
	go func() { // a Limiter closed under its calls now and then; it stays usable
		defer close(closerDone)
		rng := rand.New(rand.NewPCG(seed, 3))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(50+rng.IntN(150)) * time.Millisecond):
			}
			ls[rng.IntN(len(ls))].Close()
			closes.Add(1)
		}
	}()

	started := time.Now()
	hammer(t, ls, func(l *ratelimit.Limiter, worker int) error {
		rng := rand.New(rand.NewPCG(seed, uint64(worker)))
		pool := pools[worker%len(pools)]
		// opCtx is a call's context: one in four never ends, the others
		// end 0-3 ms after the call starts.
		opCtx := func() (context.Context, context.CancelFunc) {
			calls.Add(1)
			if rng.IntN(4) == 0 {
				return context.Background(), func() {}
			}
			return context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
		}
		for range 20 {
			key := keys[rng.IntN(len(keys))]
			perKey := hourly(window("api_key", key, "requests", 1e6, 1))
			local := hourly(window("api_key", key, "tokens", 1e6, float64(1+rng.IntN(20))))
			local.Local = true
			limits := []ratelimit.Limit{hot, perKey, local, slots}
			rng.Shuffle(len(limits), func(i, j int) { limits[i], limits[j] = limits[j], limits[i] })
			limits = limits[:1+rng.IntN(len(limits))]
			tokens := float64(rng.IntN(30))

			switch rng.IntN(3) {
			case 0: // a request alone
				ctx, cancel := opCtx()
				g, err := l.Reserve(ctx, "", "", limits)
				left := ctx.Err() != nil
				cancel()
				switch {
				case errors.Is(err, ratelimit.ErrExceeded):
					continue
				case ctxErr(err) && left:
					ended.Add(1)
					loose(limits)
					continue
				case err != nil:
					return fmt.Errorf("Reserve: %w", err)
				}
				if len(g.Leases) > 0 && rng.IntN(2) == 0 {
					ctx, cancel := opCtx()
					_, err := l.RenewLeases(ctx, g.Leases)
					cancel()
					if err != nil && !ctxErr(err) {
						return fmt.Errorf("RenewLeases: %w", err)
					}
				}
				released := 0
				if len(g.Leases) > 0 && rng.IntN(3) == 0 {
					ctx, cancel := opCtx()
					_, err := l.ReleaseLeases(ctx, g.Leases, "done")
					cancel()
					if ctxErr(err) {
						retried.Add(1)
						_, err = l.ReleaseLeases(context.Background(), g.Leases, "done")
					}
					if err != nil {
						return fmt.Errorf("ReleaseLeases: %w", err)
					}
					released = len(g.Leases)
				}
				if rng.IntN(8) == 0 {
					keep(g, released > 0) // the process dies holding it
					continue
				}
				ctx, cancel = opCtx()
				err = settle(l, ctx, g, rng.IntN(3) > 0, tokens, released)
				cancel()
				if err != nil {
					return err
				}

			case 1: // a request of a sync task: attached at Reserve or after it
				for i := range limits {
					limits[i].Local = false // FinishTask settles what has rows
				}
				ctx, cancel := opCtx()
				task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "test", Worker: "w", LeaseTTL: time.Hour})
				left := ctx.Err() != nil
				cancel()
				switch {
				case ctxErr(err) && left:
					ended.Add(1)
					continue
				case err != nil:
					return fmt.Errorf("CreateTask: %w", err)
				}
				attachLater := rng.IntN(2) == 0
				taskID, attemptID := task.ID, task.AttemptID
				if attachLater {
					taskID, attemptID = "", ""
				}
				ctx, cancel = opCtx()
				g, err := l.Reserve(ctx, taskID, attemptID, limits)
				left = ctx.Err() != nil
				cancel()
				admitted := err == nil
				switch {
				case errors.Is(err, ratelimit.ErrExceeded):
				case ctxErr(err) && left:
					ended.Add(1)
				case err != nil:
					return fmt.Errorf("Reserve for a task: %w", err)
				}
				if admitted && attachLater {
					ctx, cancel := opCtx()
					g2, err := l.Attach(ctx, task.AttemptID, g)
					cancel()
					if ctxErr(err) {
						retried.Add(1)
						g2, err = l.Attach(context.Background(), task.AttemptID, g)
					}
					if err != nil {
						return fmt.Errorf("Attach: %w", err)
					}
					g = g2
				}
				if rng.IntN(8) == 0 {
					mu.Lock()
					keptTasks++
					mu.Unlock()
					if admitted {
						keep(g, false)
					}
					continue
				}
				status := ratelimit.TaskSucceeded
				if admitted && rng.IntN(2) == 0 {
					ctx, cancel := opCtx()
					err := settle(l, ctx, g, true, tokens, 0)
					cancel()
					if err != nil {
						return err
					}
				} else {
					status = ratelimit.TaskFailed // what it holds is released by FinishTask
				}
				out := ratelimit.Outcome{Status: status}
				if status == ratelimit.TaskFailed {
					out.ErrorCode = "upstream_error"
				}
				ctx, cancel = opCtx()
				_, err = l.FinishTask(ctx, task.ID, task.ExecutionToken, out)
				cancel()
				if ctxErr(err) {
					retried.Add(1)
					_, err = l.FinishTask(context.Background(), task.ID, task.ExecutionToken, out)
					var stale *ratelimit.StaleTokenError
					if errors.As(err, &stale) && stale.Status == status {
						err = nil // the first call finished it
					}
				}
				if err != nil {
					return fmt.Errorf("FinishTask: %w", err)
				}

			default: // Reserve, then Commit, inside a caller's transaction
				tx, err := pool.Begin(context.Background())
				if err != nil {
					return err
				}
				ctx, cancel := opCtx()
				g, err := l.WithTx(tx).Reserve(ctx, "", "", limits)
				left := ctx.Err() != nil
				cancel()
				if err != nil {
					_ = tx.Rollback(context.Background())
					switch {
					case errors.Is(err, ratelimit.ErrExceeded):
					case left:
						ended.Add(1) // a statement cut off, or the transaction it ended
					default:
						return fmt.Errorf("Reserve in a transaction: %w", err)
					}
					continue
				}
				if err := tx.Commit(context.Background()); err != nil {
					return fmt.Errorf("commit of a Reserve's transaction: %w", err)
				}
				tx, err = pool.Begin(context.Background())
				if err != nil {
					return err
				}
				ctx, cancel = opCtx()
				s, err := l.WithTx(tx).Commit(ctx, g, map[string]float64{"tokens": tokens})
				left = ctx.Err() != nil
				cancel()
				if err != nil {
					_ = tx.Rollback(context.Background())
					if !left {
						return fmt.Errorf("Commit in a transaction: %w", err)
					}
					ended.Add(1)
					retried.Add(1)
					s, err = l.Commit(context.Background(), g, map[string]float64{"tokens": tokens})
					if err != nil {
						return fmt.Errorf("Commit after a transaction rolled back: %w", err)
					}
					for i, o := range s.Reservations {
						if !o.Settled {
							return fmt.Errorf("Commit after a transaction rolled back: %+v: reservation %d was settled by the rolled back one", s, i)
						}
					}
				} else if err := tx.Commit(context.Background()); err != nil {
					return fmt.Errorf("commit of a Commit's transaction: %w", err)
				}
				if err := record(g, s, ratelimit.StatusCommitted, 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
	close(stop)
	<-closerDone
	for _, l := range ls {
		l.Close()
	}
	var lost int64
	for _, l := range ls {
		lost += l.Stats().Lost
	}
	answersLost := cancels.answersGivenUp()
	s := summary(t, base)
	t.Logf("%s: %d calls, %d ended with their context's error, %d tried again, %d closes under the calls; "+
		"%d statements cancelled on the server (%d answers given up), %d lost; kept %d reservations, %d leases, %d tasks",
		time.Since(started).Round(time.Millisecond), calls.Load(), ended.Load(), retried.Load(), closes.Load(),
		cancels.cancelled(), answersLost, lost, keptReservations, keptLeases, keptTasks)
	if ended.Load() == 0 || retried.Load() == 0 {
		t.Errorf("the run should see calls that ended with their context's error, and calls tried again")
	}
	// A statement whose answer was given up on, or lost, may have committed
	// what nobody knows of: it lapses with its window or TTL.
	exact := lost == 0 && answersLost == 0
	if held := s.ReservationsOpen != keptReservations || s.LeasesUnreleased != keptLeases || s.TasksRunning != keptTasks; held && exact {
		t.Errorf("state left behind: %+v; want exactly the kept %d reservations, %d leases and %d tasks",
			s, keptReservations, keptLeases, keptTasks)
	} else if held {
		t.Logf("held after %d answers given up and %d lost: %+v", answersLost, lost, s)
	}
	for _, scope := range scopes {
		used := map[string]float64{}
		for _, row := range counterRows(t, base, scope[0], scope[1]) {
			used[row.Metric] += row.UsedValue
		}
		for _, metric := range []string{"tokens", "requests"} {
			k := scope[0] + ":" + scope[1] + " " + metric
			want := committed[k] + keptLocal[k]
			if got := used[metric]; got < want || got > want+localLoose[k] {
				t.Errorf("%s: used %v; the callers committed %v, kept %v Local and may have been charged %v more",
					k, got, committed[k], keptLocal[k], localLoose[k])
			}
		}
		assertBooksBalance(t, base, scope[0], scope[1])
	}
	assertDoctorOK(t, base)

	// Past every window and TTL, Recover and Prune give back what was kept.
	var clock testClock
	clock.advance(3 * time.Hour)
	_, m := clocked(base, &clock)
	if _, err := m.Recover(context.Background()); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	if _, err := m.Prune(context.Background(), time.Hour); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if s := summary(t, base); s.TasksRunning != 0 || s.ReservationsOpen != 0 || s.LeasesUnreleased != 0 || s.CountersReserved != 0 {
		t.Errorf("state left after Recover and Prune: %+v", s)
	}
	assertDoctorOK(t, base)
}

// limitsOf names the limits of g's Local reservations, for loose.
func limitsOf(g ratelimit.Grant) []ratelimit.Limit {
	var out []ratelimit.Limit
	for _, r := range g.Reservations {
		if r.Local {
			out = append(out, ratelimit.Limit{Scope: ratelimit.Scope{Type: r.ScopeType, Key: r.ScopeKey}, Metric: r.Metric, Amount: r.Amount, Local: true})
		}
	}
	return out
}
