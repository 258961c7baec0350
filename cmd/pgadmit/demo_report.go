package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/ratelimit"
)

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

// summary prints the closing tables and the doctor's verdict, and decides the exit code. began
// is when the demo began: its time includes the summary's reads, which with many keys take a
// while.
func (d *demo) summary(ctx context.Context, gws []*gateway, crash *crashWatch, began time.Time) error {
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
			problems = append(problems, fmt.Sprintf("%s had %s, the first: %s", g.name, plural.Count(s.errors.Load(), "error", "errors"), *s.firstErr.Load()))
		}
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\t%s\t%s\t%d\t\n", sum.requests.Load(), sum.admitted.Load(), sum.completed.Load(),
		sum.refused(), sum.refusedRequests.Load(), sum.refusedTokens.Load(), sum.refusedConc.Load(),
		thousands(sum.tokensEstimated.Load()), thousands(sum.tokensActual.Load()), sum.errors.Load())
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "tokens are of committed requests: reserved at the estimate (prompt + max_tokens), committed at the actual count;\n"+
		"%s, and the overage was recorded, not lost.\n", plural.Count(sum.overEstimate.Load(), "request used more than its estimate", "requests used more than their estimate"))
	if n := sum.lost.Load(); n > 0 {
		fmt.Fprintf(out, "%s (heartbeat too late) and stopped.\n",
			plural.Count(n, "request of a live instance lost its task's execution lease", "requests of live instances lost their task's execution lease"))
	}

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tlimit\tpeak in flight\tadmitted\trefused (concurrency)\t")
	for _, m := range d.models {
		verdict := "ok"
		if float64(m.peak.Load()) > m.concurrent {
			verdict = "ABOVE LIMIT"
			problems = append(problems, fmt.Sprintf("model %s had %s, above its limit of %s", m.name, plural.Count(m.peak.Load(), "live lease", "live leases"), amounttext.Full(m.concurrent)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d %s\t%d\t%d\t\n", m.name, amounttext.Full(m.concurrent), m.peak.Load(), verdict, m.admitted.Load(), m.refusedConc.Load())
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
		fmt.Fprintf(out, "  %s was killed at %.1fs with %s in flight: %s running, %s and %s held\n",
			crash.gw.name, crash.at.Seconds(), plural.Count(len(crash.ids), "request", "requests"), plural.Count(k.UnfinishedTasks, "task", "tasks"),
			plural.Count(k.OpenReservations, "reservation", "reservations"), plural.Count(k.LiveLeases, "lease", "leases"))
		fmt.Fprintf(out, "  the recovery sweeper (Recover every 1s) gave back in total: %s\n", shortRecovery(rec))
		n := crash.now
		fmt.Fprintf(out, "  what %s's tasks hold now: %s unfinished, %s, %s\n", crash.gw.name, plural.Count(n.UnfinishedTasks, "task", "tasks"),
			plural.Count(n.OpenReservations, "reservation", "reservations"), plural.Count(n.UnreleasedLeases, "lease", "leases"))
		switch {
		case crash.err != nil:
			problems = append(problems, fmt.Sprintf("reading what %s holds: %v", crash.gw.name, crash.err))
		case crash.clearedAt > 0:
			fmt.Fprintf(out, "  all of it came back %.1fs after the crash (execution lease %s, sweeper every 1s); without recovery\n"+
				"  the leases would have blocked their model's slots for their whole TTL (%s)\n",
				(crash.clearedAt - crash.at).Seconds(), durationtext.Operator(d.taskLease), durationtext.Operator(d.leaseTTL))
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
	maint := ratelimit.NewMaintenance(d.ops)
	res, err := maint.Recover(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  a last recovery pass: %s\n", describeRecovery(res, nil))
	rep, err := maint.Doctor(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  %s\n", strings.ReplaceAll(rep.String(), "\n", "\n  "))
	if !rep.OK() {
		problems = append(problems, "the doctor found "+plural.Count(len(rep.Problems), "problem", "problems"))
	}

	fmt.Fprintf(out, "\ndemo finished in %s\n", time.Since(began).Round(100*time.Millisecond))
	if len(problems) > 0 {
		slices.Sort(problems)
		for _, p := range problems {
			fmt.Fprintf(out, "PROBLEM: %s\n", p)
		}
		return &exitError{code: exitFailure, msg: plural.Count(len(problems), "problem", "problems") + ", see above"}
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
	add := func(n int64, one, many string) {
		if n > 0 {
			parts = append(parts, plural.Count(n, one, many))
		}
	}
	add(r.ReleasedRateReservations, "reservation released", "reservations released")
	add(r.ReleasedConcurrencyLeases, "lease released", "leases released")
	add(r.FailedAttempts, "attempt failed", "attempts failed")
	add(r.FailedTasks, "sync task failed (server_restarted)", "sync tasks failed (server_restarted)")
	add(r.RequeuedAsyncTasks, "async task requeued", "async tasks requeued")
	add(r.FailedPoisonTasks, "poison task failed", "poison tasks failed")
	add(r.CleanedTaskAdmissions, "queue admission cleaned", "queue admissions cleaned")
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
	var checked, requestsOver, tokenOver int
	for i, k := range d.keys {
		if !d.requested.has(i) {
			continue // no window
		}
		rows, err := q.CounterListByScope(ctx, d.ops, db.CounterListByScopeParams{ScopeType: k.scope.Type, ScopeKey: k.scope.Key})
		if err != nil {
			return fmt.Errorf("read the windows of %s: %w", k.scope.Key, err)
		}
		windows[k.scope.Key] = rows
		for _, w := range rows {
			checked++
			switch {
			case w.Metric == ratelimit.MetricRequests && w.UsedValue+w.ReservedValue > w.LimitValue:
				requestsOver++
				*problems = append(*problems, fmt.Sprintf("%s: %s requests in the window from %s, above its limit of %s",
					k.scope.Key, amounttext.Full(w.UsedValue+w.ReservedValue), w.WindowStart.Format(time.TimeOnly), amounttext.Full(w.LimitValue)))
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
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", strings.TrimPrefix(k.scope.Key, d.prefix), k.plan.name,
				st.Local().Format("15:04"), amounttext.Full(r.UsedValue+r.ReservedValue), amounttext.Full(r.LimitValue),
				thousands(int64(t.UsedValue+t.ReservedValue)), thousands(int64(t.LimitValue)))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "%s of %s checked: ", plural.Count(checked, "window", "windows"), plural.Count(len(d.keys), "key", "keys"))
	if requestsOver > 0 {
		fmt.Fprintf(d.out, "%s (see PROBLEM below)", plural.Count(requestsOver, "requests window ABOVE its limit", "requests windows ABOVE their limit"))
	} else {
		fmt.Fprint(d.out, "no requests window above its limit")
	}
	if tokenOver > 0 {
		fmt.Fprintf(d.out, "; %s only by\nthe recorded overage of requests that used more than their estimate",
			plural.Count(tokenOver, "tokens window above its limit", "tokens windows above theirs"))
	}
	fmt.Fprintln(d.out, ".")
	return nil
}
