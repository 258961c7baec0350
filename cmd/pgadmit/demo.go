package main

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/ratelimit"
)

func demoCommand() *command {
	return &command{
		name:    "demo",
		args:    "[flags]",
		summary: "play a realistic gateway: many keys, models, a crash and its recovery",
		help: `
Plays an AI gateway against the database, with live progress every second:

  - --instances gateway instances, each with its own connection pool and --clients clients;
  - --keys API keys on two plans (pro: 60 requests/min and 120,000 tokens/min; every fifth
    key is free: 12 requests/min and 8,000 tokens/min), chosen with a skew, so that a few
    keys are hot;
  - three models with concurrency limits shared by every instance (large 10, medium 14,
    small 16) and different latencies;
  - each request is a sync task (execution lease 4 s, heartbeated during long calls) admitted
    against requests/min, tokens/min (the estimate: prompt + max_tokens) and the model's
    concurrency, then committed with the actual token count and finished; a refusal is a 429
    recorded on the task;
  - a recovery sweeper runs Recover every second, as 'pgadmit recover --every 1s' would;
  - about a third of the way in, the last instance is killed: its clients are abandoned
    mid-call and its pool closed, leaving tasks running and reservations and leases held. Once
    their execution leases expire, the sweeper gives the capacity back.

It ends with a summary (per instance, per model, the crash and its recovery, tasks by
outcome) and a doctor check. Every run uses fresh scope keys, so runs do not disturb each
other; on a given database, the demo migrates it, and its recovery sweeper and doctor act on
the whole database (use a scratch one).

Exits 1 when the doctor finds problems, the killed instance's capacity did not come back, a
model's live leases or a key's requests went above their limit, or a live instance hit an
error.`,
		db:  dbOptional,
		run: runDemo,
	}
}

// demo is one run of the demo.
type demo struct {
	a         *app
	out       io.Writer
	prefix    string // of every scope key of this run
	keys      []demoKey
	models    []*demoModel
	taskLease time.Duration // execution lease of each task
	leaseTTL  time.Duration // concurrency lease TTL: far longer than the run, so only recovery frees a dead holder's slots

	ops   *pgxpool.Pool // the operator's pool: recovery sweeper, sampling, summary
	start time.Time

	mu       sync.Mutex
	notes    []string // events to print on the next progress line
	recovery ratelimit.RecoveryResult
	lastErr  error // of the sweeper or the sampler

	lastRequests int64 // at the previous progress line
}

func (d *demo) note(format string, args ...any) {
	d.mu.Lock()
	d.notes = append(d.notes, fmt.Sprintf(format, args...))
	d.mu.Unlock()
}

func (d *demo) since() time.Duration { return time.Since(d.start) }

// pickModel draws a model by its share of requests.
func (d *demo) pickModel(rng *mrand.Rand) *demoModel {
	x := rng.Float64()
	for _, m := range d.models {
		if x < m.share {
			return m
		}
		x -= m.share
	}
	return d.models[len(d.models)-1]
}

func runDemo(ctx context.Context, a *app, args []string) error {
	fs := a.flags(a.cmd)
	duration := fs.Duration("duration", 20*time.Second, "how long the gateway runs (the crash comes at about a third)")
	instances := fs.Int("instances", 3, "gateway instances, each with its own pool; the last one is killed")
	clients := fs.Int("clients", 12, "concurrent clients per instance")
	keys := fs.Int("keys", 150, "API keys")
	args, err := a.parse(a.cmd, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(args); err != nil {
		return err
	}
	switch {
	case *duration < 5*time.Second || *duration > 10*time.Minute:
		return usagef("--duration must be between 5s and 10m, got %s", *duration)
	case *instances < 2 || *instances > 16:
		return usagef("--instances must be between 2 and 16, got %d", *instances)
	case *clients < 1 || *clients > 64:
		return usagef("--clients must be between 1 and 64, got %d", *clients)
	case *keys < 2 || *keys > 1_000_000:
		return usagef("--keys must be between 2 and 1000000, got %d", *keys)
	}
	total := time.Now()

	dsn, stop, err := a.database(ctx)
	if err != nil {
		return err
	}
	defer stop()
	ops, err := a.connect(ctx, dsn, 4)
	if err != nil {
		return err
	}
	defer ops.Close()
	version, err := a.migrate(ctx, ops)
	if err != nil {
		return err
	}

	d := &demo{a: a, out: a.stdout, ops: ops, taskLease: 4 * time.Second, leaseTTL: 10 * time.Minute,
		prefix: "demo-" + bench.NewRunID()[:6] + "/"}
	for i := range *keys {
		plan := planPro
		if i%5 == 4 {
			plan = planFree
		}
		d.keys = append(d.keys, demoKey{scope: ratelimit.Scope{Type: "api_key", Key: fmt.Sprintf("%skey-%04d", d.prefix, i)}, plan: plan})
	}
	d.models = demoModels(d.prefix)

	fmt.Fprintf(d.out, "pgadmit demo: schema version %d; scopes of this run start with %q\n", version, d.prefix)
	fmt.Fprintf(d.out, "%d gateway instances x %d clients, %d API keys (every 5th on the free plan), models:", *instances, *clients, *keys)
	for _, m := range d.models {
		fmt.Fprintf(d.out, " %s (max %g in flight)", m.name, m.concurrent)
	}
	fmt.Fprintf(d.out, "\nrunning for %s; the last instance is killed at %s\n\n", *duration, max((*duration/3).Round(time.Second), time.Second))

	// The gateway instances.
	gws := make([]*gateway, *instances)
	for i := range gws {
		cfg, err := a.poolConfig(dsn, int32(*clients))
		if err != nil {
			return err
		}
		name := fmt.Sprintf("gw-%d", i+1)
		cfg.ConnConfig.RuntimeParams["application_name"] = "pgadmit demo " + name
		pool, err := a.open(ctx, dsn, cfg)
		if err != nil {
			return err
		}
		defer pool.Close() // a no-op for an instance that was drained or killed
		gctx, cancel := context.WithCancel(ctx)
		defer cancel()
		gws[i] = &gateway{d: d, name: name, pool: pool, lim: ratelimit.New(pool), ctx: gctx, cancel: cancel, inflight: map[string]*demoModel{}}
	}

	d.start = time.Now()
	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() { defer bgWG.Done(); d.sweep(bg) }()
	go func() { defer bgWG.Done(); d.sample(bg) }()
	for _, g := range gws {
		g.start(*clients)
	}

	victim := gws[len(gws)-1]
	var crash *crashWatch
	d.printHeader()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	killAt := max((*duration / 3).Round(time.Second), time.Second)
	for second := 1; ; second++ {
		select {
		case <-ctx.Done():
			for _, g := range gws {
				g.cancel()
				g.wg.Wait()
			}
			stopBG()
			bgWG.Wait()
			return ctx.Err()
		case <-tick.C:
		}
		if crash == nil && time.Duration(second)*time.Second >= killAt {
			crash = d.kill(ctx, victim)
		}
		if crash != nil {
			crash.poll(ctx, d)
		}
		d.printProgress(second, gws)
		if d.since() >= *duration {
			break
		}
	}

	// Let every live instance finish its requests in flight, then stop the sweeper.
	fmt.Fprintf(d.out, "\nstopping: live instances finish their requests in flight...\n")
	for _, g := range gws[:len(gws)-1] {
		g.drain()
	}
	stopBG()
	bgWG.Wait()
	if crash != nil {
		if err := d.awaitRecovery(ctx, crash); err != nil {
			return err
		}
	}
	return d.summary(ctx, gws, crash, time.Since(total))
}

// awaitRecovery waits, running recovery passes itself now that the sweeper stopped, until the
// dead instance's capacity is back or its execution leases have had ample time to expire (a
// short run can end before they do).
func (d *demo) awaitRecovery(ctx context.Context, crash *crashWatch) error {
	lim := ratelimit.New(d.ops)
	deadline := time.Now().Add(d.taskLease + 5*time.Second)
	for crash.poll(ctx, d); crash.clearedAt == 0 && crash.err == nil && time.Now().Before(deadline); crash.poll(ctx, d) {
		d.flushNotes()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
		res, err := lim.Recover(ctx)
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
	lim := ratelimit.New(d.ops)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		res, err := lim.Recover(ctx)
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
	d.note("%s KILLED with %d requests in flight: %d tasks running, %d reservations and %d leases held",
		g.name, len(w.ids), w.atKill.UnfinishedTasks, w.atKill.OpenReservations, w.atKill.LiveLeases)
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

func (d *demo) printHeader() {
	fmt.Fprintf(d.out, "%5s %6s %9s  %-23s %9s %9s\n", "", "", "", "---- refused by ----", "", "")
	fmt.Fprintf(d.out, "%5s %6s %9s  %7s %7s %7s %9s %9s  %s\n", "time", "req/s", "admitted", "req/min", "tok/min", "concur.", "in flight", "completed", "events")
}

// printProgress prints one progress line: totals over live and dead instances, then the events
// of the last second.
func (d *demo) printProgress(second int, gws []*gateway) {
	var requests, admitted, rReq, rTok, rCon, inFlight, completed int64
	for _, g := range gws {
		requests += g.st.requests.Load()
		admitted += g.st.admitted.Load()
		rReq += g.st.refusedRequests.Load()
		rTok += g.st.refusedTokens.Load()
		rCon += g.st.refusedConc.Load()
		if !g.killed.Load() {
			inFlight += g.st.inFlight.Load()
		}
		completed += g.st.completed.Load()
	}
	rate := float64(requests - d.lastRequests)
	d.lastRequests = requests
	d.mu.Lock()
	notes := d.notes
	d.notes = nil
	d.mu.Unlock()
	line := fmt.Sprintf("%4ds %6.0f %9d  %7d %7d %7d %9d %9d", second, rate, admitted, rReq, rTok, rCon, inFlight, completed)
	if len(notes) == 0 {
		fmt.Fprintln(d.out, line)
		return
	}
	fmt.Fprintf(d.out, "%s  %s\n", line, notes[0])
	for _, n := range notes[1:] {
		fmt.Fprintf(d.out, "%*s  %s\n", len(line), "", n)
	}
}

// summary prints the closing tables and the doctor's verdict, and decides the exit code.
func (d *demo) summary(ctx context.Context, gws []*gateway, crash *crashWatch, total time.Duration) error {
	var problems []string
	out := d.out
	fmt.Fprintf(out, "\nSUMMARY after %s of traffic\n\n", d.since().Round(100*time.Millisecond))

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "instance\trequests\tadmitted\tcompleted\trefused\treq/min\ttok/min\tconcur.\tabandoned\ttokens est.\ttokens actual\terrors\t")
	var sum instStats
	for _, g := range gws {
		s := &g.st
		name, abandoned := g.name, "-"
		if g.killed.Load() {
			name += " (killed)"
			if crash != nil {
				abandoned = fmt.Sprint(len(crash.ids))
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t\n", name, s.requests.Load(), s.admitted.Load(), s.completed.Load(),
			s.refused(), s.refusedRequests.Load(), s.refusedTokens.Load(), s.refusedConc.Load(), abandoned,
			thousands(s.tokensEstimated.Load()), thousands(s.tokensActual.Load()), s.errors.Load())
		sum.requests.Add(s.requests.Load())
		sum.admitted.Add(s.admitted.Load())
		sum.completed.Add(s.completed.Load())
		sum.refusedRequests.Add(s.refusedRequests.Load())
		sum.refusedTokens.Add(s.refusedTokens.Load())
		sum.refusedConc.Add(s.refusedConc.Load())
		sum.tokensEstimated.Add(s.tokensEstimated.Load())
		sum.tokensActual.Add(s.tokensActual.Load())
		sum.overEstimate.Add(s.overEstimate.Load())
		sum.lost.Add(s.lost.Load())
		sum.errors.Add(s.errors.Load())
		if !g.killed.Load() && s.errors.Load() > 0 {
			problems = append(problems, fmt.Sprintf("%s had %d errors, the first: %s", g.name, s.errors.Load(), *s.firstErr.Load()))
		}
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\t%s\t%s\t%d\t\n", sum.requests.Load(), sum.admitted.Load(), sum.completed.Load(),
		sum.refused(), sum.refusedRequests.Load(), sum.refusedTokens.Load(), sum.refusedConc.Load(),
		thousands(sum.tokensEstimated.Load()), thousands(sum.tokensActual.Load()), sum.errors.Load())
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "tokens are of committed requests: reserved at the estimate (prompt + max_tokens), committed at the actual count;\n"+
		"%d requests used more than their estimate, and the overage was recorded, not lost.\n", sum.overEstimate.Load())
	if n := sum.lost.Load(); n > 0 {
		fmt.Fprintf(out, "%d requests of live instances lost their task's execution lease (heartbeat too late) and stopped.\n", n)
	}

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tlimit\tpeak in flight\tadmitted\trefused (concurrency)\t")
	for _, m := range d.models {
		verdict := "ok"
		if float64(m.peak.Load()) > m.concurrent {
			verdict = "ABOVE LIMIT"
			problems = append(problems, fmt.Sprintf("model %s had %d live leases, above its limit of %g", m.name, m.peak.Load(), m.concurrent))
		}
		fmt.Fprintf(tw, "%s\t%g\t%d %s\t%d\t%d\t\n", m.name, m.concurrent, m.peak.Load(), verdict, m.admitted.Load(), m.refusedConc.Load())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "peak in flight: the most live leases the database held for the model, sampled every 250 ms, across all instances.")

	if err := d.printKeys(ctx, &problems); err != nil {
		return err
	}

	d.mu.Lock()
	rec, lastErr := d.recovery, d.lastErr
	d.mu.Unlock()
	fmt.Fprintf(out, "\nCRASH AND RECOVERY\n")
	if crash != nil {
		k := crash.atKill
		fmt.Fprintf(out, "  %s was killed at %.1fs with %d requests in flight: %d tasks running, %d reservations and %d leases held\n",
			crash.gw.name, crash.at.Seconds(), len(crash.ids), k.UnfinishedTasks, k.OpenReservations, k.LiveLeases)
		fmt.Fprintf(out, "  the recovery sweeper (Recover every 1s) gave back in total: %s\n", shortRecovery(rec))
		n := crash.now
		fmt.Fprintf(out, "  what %s's tasks hold now: %d tasks unfinished, %d reservations, %d leases\n",
			crash.gw.name, n.UnfinishedTasks, n.OpenReservations, n.UnreleasedLeases)
		switch {
		case crash.err != nil:
			problems = append(problems, fmt.Sprintf("reading what %s holds: %v", crash.gw.name, crash.err))
		case crash.clearedAt > 0:
			fmt.Fprintf(out, "  all of it came back %.1fs after the crash (execution lease %s, sweeper every 1s); without recovery\n"+
				"  the leases would have blocked their model's slots for their whole TTL (%s)\n",
				(crash.clearedAt - crash.at).Seconds(), d.taskLease, d.leaseTTL)
		default:
			problems = append(problems, fmt.Sprintf("%s's capacity did not come back", crash.gw.name))
		}
	}
	if lastErr != nil {
		problems = append(problems, lastErr.Error())
	}

	if err := d.printOutcomes(ctx, gws); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nBOOKS\n")
	lim := ratelimit.New(d.ops)
	res, err := lim.Recover(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  a last recovery pass: %s\n", describeRecovery(res))
	rep, err := lim.Doctor(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  %s\n", strings.ReplaceAll(rep.String(), "\n", "\n  "))
	if !rep.OK() {
		problems = append(problems, fmt.Sprintf("the doctor found %d problem(s)", len(rep.Problems)))
	}

	fmt.Fprintf(out, "\ndemo finished in %s\n", total.Round(100*time.Millisecond))
	if len(problems) > 0 {
		slices.Sort(problems)
		for _, p := range problems {
			fmt.Fprintf(out, "PROBLEM: %s\n", p)
		}
		return &exitError{code: exitFailure, msg: fmt.Sprintf("%d problem(s), see above", len(problems))}
	}
	return nil
}

// printOutcomes prints how the run's tasks ended, as the database has them.
func (d *demo) printOutcomes(ctx context.Context, gws []*gateway) error {
	var ids []pgtype.UUID
	for _, g := range gws {
		g.mu.Lock()
		ids = append(ids, g.created...)
		g.mu.Unlock()
	}
	counts := map[[2]string]int64{}
	const chunk = 5000
	for len(ids) > 0 {
		n := min(len(ids), chunk)
		rows, err := db.New().InspectTasksByOutcome(ctx, d.ops, ids[:n])
		if err != nil {
			return fmt.Errorf("read task outcomes: %w", err)
		}
		for _, r := range rows {
			counts[[2]string{r.Status, r.ErrorCode}] += r.Tasks
		}
		ids = ids[n:]
	}
	keys := make([][2]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int {
		if c := counts[b] - counts[a]; c != 0 {
			return int(c)
		}
		return strings.Compare(a[0]+a[1], b[0]+b[1])
	})
	fmt.Fprintf(d.out, "\nTASKS BY OUTCOME (as stored)\n")
	tw := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', 0)
	for _, k := range keys {
		code := k[1]
		if code == "" {
			code = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\n", k[0], code, counts[k])
	}
	return tw.Flush()
}

// shortRecovery says what recovery did, naming only what it did.
func shortRecovery(r ratelimit.RecoveryResult) string {
	var parts []string
	add := func(n int64, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(r.ReleasedRateReservations, "reservations released")
	add(r.ReleasedConcurrencyLeases, "leases released")
	add(r.FailedAttempts, "attempts failed")
	add(r.FailedTasks, "sync tasks failed (server_restarted)")
	add(r.RequeuedAsyncTasks, "async tasks requeued")
	add(r.FailedPoisonTasks, "poison tasks failed")
	add(r.CleanedTaskAdmissions, "queue admissions cleaned")
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// thousands formats n with comma separators.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// printKeys shows the busiest keys' windows, as the database has them, and checks every window
// of every key of the run: requests never above the limit (a request's actual amount is its
// estimate, 1); tokens above the limit only by recorded overage.
func (d *demo) printKeys(ctx context.Context, problems *[]string) error {
	q := db.New()
	windows := map[string][]db.CounterListByScopeRow{}
	var checked, tokenOver int
	for _, k := range d.keys {
		rows, err := q.CounterListByScope(ctx, d.ops, db.CounterListByScopeParams{ScopeType: k.scope.Type, ScopeKey: k.scope.Key})
		if err != nil {
			return fmt.Errorf("read the windows of %s: %w", k.scope.Key, err)
		}
		windows[k.scope.Key] = rows
		for _, w := range rows {
			checked++
			switch {
			case w.Metric == ratelimit.MetricRequests && w.UsedValue+w.ReservedValue > w.LimitValue:
				*problems = append(*problems, fmt.Sprintf("%s: %g requests in the window from %s, above its limit of %g",
					k.scope.Key, w.UsedValue+w.ReservedValue, w.WindowStart.Format(time.TimeOnly), w.LimitValue))
			case w.Metric == ratelimit.MetricTokens && w.UsedValue+w.ReservedValue > w.LimitValue:
				tokenOver++
			}
		}
	}

	fmt.Fprintf(d.out, "\nBUSIEST KEYS (every minute window, from the database)\n")
	tw := tabwriter.NewWriter(d.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "key\tplan\twindow\trequests used\tlimit\ttokens used\tlimit\t")
	for _, i := range []int{0, 1, 2, 4} { // the three busiest, and the busiest key on the free plan
		if i >= len(d.keys) {
			continue
		}
		k := d.keys[i]
		byStart := map[time.Time][2]db.CounterListByScopeRow{}
		var starts []time.Time
		for _, w := range windows[k.scope.Key] {
			pair, seen := byStart[w.WindowStart]
			if !seen {
				starts = append(starts, w.WindowStart)
			}
			if w.Metric == ratelimit.MetricRequests {
				pair[0] = w
			} else {
				pair[1] = w
			}
			byStart[w.WindowStart] = pair
		}
		slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
		for _, st := range starts {
			r, t := byStart[st][0], byStart[st][1]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%g\t%g\t%s\t%s\t\n", strings.TrimPrefix(k.scope.Key, d.prefix), k.plan.name,
				st.Local().Format("15:04"), r.UsedValue+r.ReservedValue, r.LimitValue,
				thousands(int64(t.UsedValue+t.ReservedValue)), thousands(int64(t.LimitValue)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "%d windows of %d keys checked: no requests window above its limit", checked, len(d.keys))
	if tokenOver > 0 {
		fmt.Fprintf(d.out, "; %d tokens windows above theirs only by\nthe recorded overage of requests that used more than their estimate", tokenOver)
	}
	fmt.Fprintln(d.out, ".")
	return nil
}
