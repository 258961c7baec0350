package ratelimit

import (
	"context"
	"slices"
	"time"

	"github.com/pgadmit/pgadmit/db"
)

// localTaken is a window limit admitted from a local block.
type localTaken struct {
	index     int // the limit's position in the caller's slice
	admission *localAdmission
	limit     windowLimit
	remaining float64
}

// takeLocal admits the admission's Local window limits from this process's
// blocks and removes them from a, which keeps what the database must
// decide. A Local limit no block can serve stays in a: the database decides
// it, exactly, like any other (counted in LocalStats.InDatabase). With ctx
// already ended it takes nothing, and counts nothing: the database path
// then returns ctx's error, as it does for any limit; a limit whose ctx
// ended while it waited for a block is not counted either.
func (l *Limiter) takeLocal(ctx context.Context, a *admission) []localTaken {
	if l.allot == nil || ctx.Err() != nil {
		return nil
	}
	var taken []localTaken
	keep := a.windows[:0:0]
	for _, w := range a.windows {
		if !w.Limit.Local {
			keep = append(keep, w)
			continue
		}
		la := l.allot.take(ctx, w)
		if la == nil {
			if ctx.Err() == nil { // ended waiting for a block: the database decides nothing either
				l.allot.counts.inDatabase.Add(1)
			}
			keep = append(keep, w)
			continue
		}
		la.set.mu.Lock()
		remaining := la.b.free().Approx()
		la.set.mu.Unlock()
		taken = append(taken, localTaken{index: w.index, admission: la, limit: w, remaining: remaining})
	}
	a.windows = keep
	return taken
}

// fenceLocal checks the task and attempt of an admission for a task whose
// limits were all admitted from blocks (taken), which sends no other
// statement: it is fenced to its claim as any admission is (ErrTaskFinished,
// ErrUnknownTask), by one read that locks nothing, the counters' rows
// included. An admission for no task, or that took nothing (every amount
// zero), is not checked.
func (l *Limiter) fenceLocal(ctx context.Context, a *admission, taken []localTaken) error {
	if len(taken) == 0 || (!a.task.Valid && !a.attempt.Valid) {
		return nil
	}
	refusal, err := l.queries.AdmissionTaskFence(ctx, l.conn, db.AdmissionTaskFenceParams{TaskID: a.task, AttemptID: a.attempt})
	if err != nil {
		return wrapDBError(ctx, "reserve", err)
	}
	return refusalError(refusal, a.taskID, a.attemptID)
}

// giveBack returns what an admission refused as a whole took from blocks.
func giveBack(taken []localTaken) {
	for _, t := range taken {
		t.admission.settle(false, 0)
	}
}

// localReservation is the Reservation of a limit admitted from a block.
func (t localTaken) reservation() Reservation {
	w, b := t.limit, t.admission.b
	return Reservation{
		ScopeType: w.Limit.Scope.Type, ScopeKey: w.Limit.Scope.Key, Metric: w.Limit.Metric,
		Window: time.Duration(w.windowSeconds) * time.Second, WindowStart: b.windowStart, ResetAt: b.resetAt,
		Limit: w.Limit.Limit, Amount: w.Limit.Amount, Remaining: t.remaining,
		Local: true, Allotment: idString(b.id), LocalID: t.admission.localID(), local: t.admission,
	}
}

// localGrant is the Grant of an admission whose limits were all admitted
// from blocks.
func localGrant(taskID, attemptID string, taken []localTaken, a *allotments) Grant {
	g := Grant{TaskID: taskID, AttemptID: attemptID}
	if a != nil && len(taken) > 0 {
		g.DecidedAt = a.dbNow()
	}
	return withLocal(g, taken)
}

// withLocal adds the local reservations to a grant from the database,
// keeping the caller's order of limits.
func withLocal(g Grant, taken []localTaken) Grant {
	if len(taken) == 0 {
		return g
	}
	type placed struct {
		index int
		r     Reservation
	}
	all := make([]placed, 0, len(g.Reservations)+len(taken))
	for _, r := range g.Reservations {
		all = append(all, placed{r.index, r})
	}
	for _, t := range taken {
		all = append(all, placed{t.index, t.reservation()})
	}
	slices.SortStableFunc(all, func(x, y placed) int { return x.index - y.index })
	g.Reservations = make([]Reservation, len(all))
	for i, p := range all {
		g.Reservations[i] = p.r
	}
	return g
}
