package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// awaitRecovery waits, running recovery passes itself now that the sweeper stopped, until the
// dead instance's capacity is back or its execution leases have had ample time to expire (a
// short run can end before they do).
func (d *demo) awaitRecovery(ctx context.Context, crash *crashWatch) error {
	maint := ratelimit.NewMaintenance(d.ops)
	deadline := time.Now().Add(d.taskLease + 5*time.Second)
	for crash.poll(ctx, d); crash.clearedAt == 0 && crash.err == nil && time.Now().Before(deadline); crash.poll(ctx, d) {
		d.flushNotes()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		res, err := maint.Recover(ctx)
		if err != nil {
			return err
		}
		if !res.Zero() {
			d.mu.Lock()
			d.recovery = addRecovery(d.recovery, res)
			d.mu.Unlock()
			d.note("recover: %s", shortRecovery(res))
		}
	}
	d.flushNotes()
	return nil
}

// drainLive drains the live instances, following the crash meanwhile: with many clients a drain
// takes seconds, and the dead instance's capacity often comes back during it; polled only
// afterwards, it would be reported back when the drain ended. The sweeper's events are printed
// as they come, with their time.
func (d *demo) drainLive(ctx context.Context, live []*gateway, crash *crashWatch) {
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for _, g := range live {
			g.drain()
		}
	}()
	t := time.NewTicker(time.Second) // as often as the progress lines
	defer t.Stop()
	for {
		select {
		case <-drained:
			return
		case <-t.C:
		}
		if crash != nil {
			crash.poll(ctx, d)
		}
		d.flushNotes()
	}
}

// flushNotes prints the pending events on lines of their own.
func (d *demo) flushNotes() {
	d.mu.Lock()
	notes := d.notes
	d.notes = nil
	d.mu.Unlock()
	for _, n := range notes {
		fmt.Fprintf(d.out, "%6.1fs  %s\n", d.since().Seconds(), n)
	}
}

// sweep runs Recover every second, as `pgadmit recover --every 1s` does.
func (d *demo) sweep(ctx context.Context) {
	maint := ratelimit.NewMaintenance(d.ops)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := maint.Recover(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.mu.Lock()
			d.lastErr = fmt.Errorf("recover: %w", err)
			d.mu.Unlock()
			continue
		}
		if !res.Zero() {
			d.mu.Lock()
			d.recovery = addRecovery(d.recovery, res)
			d.mu.Unlock()
			d.note("recover: %s", shortRecovery(res))
		}
	}
}

func addRecovery(a, b ratelimit.RecoveryResult) ratelimit.RecoveryResult {
	a.ReleasedConcurrencyLeases += b.ReleasedConcurrencyLeases
	a.ReleasedRateReservations += b.ReleasedRateReservations
	a.FailedAttempts += b.FailedAttempts
	a.FailedTasks += b.FailedTasks
	a.RequeuedAsyncTasks += b.RequeuedAsyncTasks
	a.FailedPoisonTasks += b.FailedPoisonTasks
	a.CleanedTaskAdmissions += b.CleanedTaskAdmissions
	return a
}

// sample reads each model's live leases from the database four times a second and keeps the
// peak: the proof that no model ever had more requests in flight than its limit, whichever
// instance held them.
func (d *demo) sample(ctx context.Context) {
	q := db.New()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		for _, m := range d.models {
			rows, err := q.InspectLeases(ctx, d.ops, db.InspectLeasesParams{
				ScopeType: pgtype.Text{String: m.scope.Type, Valid: true}, ScopeKey: pgtype.Text{String: m.scope.Key, Valid: true}, MaxRows: 1,
			})
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				d.mu.Lock()
				d.lastErr = fmt.Errorf("sample leases: %w", err)
				d.mu.Unlock()
				continue
			}
			if len(rows) == 1 {
				for live := rows[0].LiveLeases; ; {
					p := m.peak.Load()
					if live <= p || m.peak.CompareAndSwap(p, live) {
						break
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// crashWatch follows what a killed instance's tasks hold in the database until recovery has
// given all of it back.
type crashWatch struct {
	gw        *gateway
	at        time.Duration // since the start
	ids       []pgtype.UUID
	atKill    db.InspectTasksHoldingRow
	now       db.InspectTasksHoldingRow
	clearedAt time.Duration // since the start; 0 while something is still held
	err       error
}

// kill kills g and reports what it left behind.
func (d *demo) kill(ctx context.Context, g *gateway) *crashWatch {
	at := d.since()
	inflight := g.kill()
	w := &crashWatch{gw: g, at: at}
	for id := range inflight {
		var u pgtype.UUID
		if err := u.Scan(id); err == nil {
			w.ids = append(w.ids, u)
		}
	}
	w.atKill, w.err = db.New().InspectTasksHolding(ctx, d.ops, w.ids)
	w.now = w.atKill
	d.note("%s KILLED with %s in flight: %s running, %s and %s held", g.name, plural.Count(len(w.ids), "request", "requests"),
		plural.Count(w.atKill.UnfinishedTasks, "task", "tasks"), plural.Count(w.atKill.OpenReservations, "reservation", "reservations"),
		plural.Count(w.atKill.LiveLeases, "lease", "leases"))
	return w
}

// poll re-reads what the dead instance's tasks hold.
func (w *crashWatch) poll(ctx context.Context, d *demo) {
	if w.clearedAt > 0 || w.err != nil {
		return
	}
	now, err := db.New().InspectTasksHolding(ctx, d.ops, w.ids)
	if err != nil {
		w.err = err
		return
	}
	w.now = now
	if now.UnfinishedTasks == 0 && now.OpenReservations == 0 && now.UnreleasedLeases == 0 {
		w.clearedAt = d.since()
		d.note("%s's capacity is back, %.1fs after the crash", w.gw.name, (w.clearedAt - w.at).Seconds())
	} else if now.ExpiredTasks > 0 {
		d.note("%s's tasks: %d running on an expired execution lease, awaiting recovery", w.gw.name, now.ExpiredTasks)
	}
}
