package main

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/internal/plural"
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
other; on a given database, the demo migrates it (where 'pgadmit migrate up' would refuse, it
refuses the same way, creating nothing), and its recovery sweeper and doctor act on the whole
database (use a scratch one).

Exits 1 when the doctor finds problems, the killed instance's capacity did not come back, a
model's live leases or a key's requests went above their limit, or a live instance hit an
error.

Interrupted (Ctrl-C), it prints "interrupted" and no summary, having given back what its
instances held: the tasks of their requests in flight are finished (cancelled, "interrupted"),
releasing their reservations and leases, and the Limiters closed (with --http: the gateway
stopped, its Limiter closed), for at most 5s: what a server that does not answer has not taken
back by then stays held until a lease's TTL, its window's end or 'pgadmit recover' frees it (a
warning says so).

With --http, it runs an HTTP gateway instead (package httpadmit): a real server on 127.0.0.1
admitting each request with the middleware, in front of a fake upstream that streams tokens
as server-sent events, and --clients real HTTP clients on --keys API keys (default 20) for
--duration (default 10s), every 8th request cancelled mid-stream. It prints the rate-limit
headers of admitted responses and of a 429 with its problem body, what a request gets when the
database hangs or is stopped (fail closed: 503; fail open: 200; through a second middleware
with httpadmit's default decision timeout, 250ms, whatever --decision-timeout says: a hanging
database answers within it plus up to 100 ms, as package httpadmit says), and the gateway's
/metrics page; then checks that nothing stays held and the books balance. Exits 1 when one of
these checks fails.`,
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
	requested requestedKeys // of keys
	models    []*demoModel
	taskLease time.Duration // execution lease of each task
	leaseTTL  time.Duration // concurrency lease TTL: far longer than the run, so only recovery frees a dead holder's slots

	ops   *pgxpool.Pool // the operator's pool: recovery sweeper, sampling, summary
	grace *grace.Grace  // bounds what an interrupted run gives back
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
	duration := fs.Duration("duration", 20*time.Second, "how long the gateway runs, 5s to 10m (the crash comes at about a third) (default 20s; 10s with --http)")
	instances := fs.Int("instances", 3, "`N` gateway instances, each with its own pool, 2 to 16; the last one is killed (not with --http)")
	clients := fs.Int("clients", 12, "`N` concurrent clients per instance, 1 to 64")
	keys := fs.Int("keys", 150, "`N` API keys, 2 to 1000000 (default 150; 20 with --http)")
	httpMode := fs.Bool("http", false, "run an HTTP gateway (package httpadmit) in front of a fake streaming upstream instead")
	decisionTimeout := fs.Duration("decision-timeout", 500*time.Millisecond, "with --http: how long the gateway waits for a decision before its failure policy answers (503, fail closed), 1ms to 1m")
	args, err := a.parse(a.cmd, fs, args)
	if err != nil {
		return err
	}
	if err := noArgs(args); err != nil {
		return err
	}
	if *httpMode && !flagGiven(fs, "duration") {
		*duration = 10 * time.Second
	}
	if *httpMode && !flagGiven(fs, "keys") {
		*keys = 20
	}
	switch {
	case *duration < 5*time.Second || *duration > 10*time.Minute:
		return usagef("--duration must be between 5s and 10m, got %s", durationtext.Operator(*duration))
	case flagGiven(fs, "instances") && *httpMode:
		// The HTTP demo runs one gateway: say so rather than ignore the flag.
		return usagef("--instances does not apply to --http, which runs one gateway")
	case *instances < 2 || *instances > 16:
		return usagef("--instances must be between 2 and 16, got %d", *instances)
	case *clients < 1 || *clients > 64:
		return usagef("--clients must be between 1 and 64, got %d", *clients)
	case *keys < 2 || *keys > 1_000_000:
		return usagef("--keys must be between 2 and 1000000, got %d", *keys)
	case flagGiven(fs, "decision-timeout") && !*httpMode:
		return usagef("--decision-timeout needs --http")
	case *decisionTimeout < time.Millisecond || *decisionTimeout > time.Minute:
		return usagef("--decision-timeout must be between 1ms and 1m, got %s", durationtext.Operator(*decisionTimeout))
	}
	if *httpMode {
		return runHTTPDemo(ctx, a, *duration, *clients, *keys, *decisionTimeout)
	}
	began := time.Now()
	gr := grace.After(ctx, grace.Default)
	defer gr.End()

	dsn, stop, err := a.database(ctx)
	if err != nil {
		return err
	}
	defer stop()
	ops, err := a.connect(ctx, dsn, 4)
	if err != nil {
		return err
	}
	defer func() { gr.ClosePool(ops) }()
	version, err := a.migrate(ctx, ops)
	if err != nil {
		return err
	}
	conns, err := demoConnections(ctx, ops, *instances, *clients)
	if err != nil {
		return err
	}

	d := &demo{a: a, out: a.stdout, ops: ops, grace: gr, taskLease: 4 * time.Second, leaseTTL: 10 * time.Minute,
		prefix: "demo-" + bench.NewRunID()[:6] + "/"}
	for i := range *keys {
		plan := planPro
		if i%5 == 4 {
			plan = planFree
		}
		d.keys = append(d.keys, demoKey{scope: ratelimit.Scope{Type: "api_key", Key: fmt.Sprintf("%skey-%04d", d.prefix, i)}, plan: plan})
	}
	d.requested = make(requestedKeys, len(d.keys))
	d.models = demoModels(d.prefix)

	fmt.Fprintf(d.out, "pgadmit demo: schema version %d; scopes of this run start with %q\n", version, d.prefix)
	fmt.Fprintf(d.out, "%s x %s", plural.Count(*instances, "gateway instance", "gateway instances"), plural.Count(*clients, "client", "clients"))
	if conns < *clients {
		fmt.Fprintf(d.out, " (%s each, for the server's max_connections)", plural.Count(conns, "connection", "connections"))
	}
	fmt.Fprintf(d.out, ", %s (every 5th on the free plan), models:", plural.Count(*keys, "API key", "API keys"))
	for _, m := range d.models {
		fmt.Fprintf(d.out, " %s (max %s in flight)", m.name, amounttext.Full(m.concurrent))
	}
	fmt.Fprintf(d.out, "\nrunning for %s; the last instance is killed at %s\n\n", durationtext.Operator(*duration),
		durationtext.Operator(max((*duration/3).Round(time.Second), time.Second)))

	// The gateway instances.
	gws := make([]*gateway, *instances)
	for i := range gws {
		cfg, err := a.poolConfig(dsn, int32(conns))
		if err != nil {
			return err
		}
		name := fmt.Sprintf("gw-%d", i+1)
		cfg.ConnConfig.RuntimeParams["application_name"] = "pgadmit demo " + name
		pool, err := a.open(ctx, dsn, cfg)
		if err != nil {
			return err
		}
		defer func() { gr.ClosePool(pool) }() // a no-op for an instance that was drained or killed
		gctx, cancel := context.WithCancel(ctx)
		defer cancel()
		gws[i] = &gateway{d: d, name: name, pool: pool, lim: ratelimit.New(pool), ctx: gctx, cancel: cancel, inflight: map[string]string{}}
	}

	d.start = time.Now()
	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() { defer bgWG.Done(); d.sweep(bg) }()
	go func() { defer bgWG.Done(); d.sample(bg) }()
	// Interrupted, the demo gives back what its instances hold before it returns (and before
	// their pools close).
	defer func() {
		if ctx.Err() == nil {
			return
		}
		stopBG()
		gr.Wait(bgWG.Wait)
		d.giveBack(gws)
		if gr.LeftHeld() {
			a.warnLeftHeld()
		}
	}()
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
	d.drainLive(ctx, gws[:len(gws)-1], crash)
	stopBG()
	bgWG.Wait()
	if crash != nil {
		if err := d.awaitRecovery(ctx, crash); err != nil {
			return err
		}
	}
	// An interrupt during the drain or the summary leaves "interrupted" alone, not the
	// summary of a run cut short.
	return closingReport(ctx, d.out, func(w io.Writer) error {
		d.out = w
		return d.summary(ctx, gws, crash, began)
	})
}

// demoConnections returns how many connections each instance's pool may hold: one per client,
// or fewer when the server cannot take them all (16 instances of 64 clients would ask for
// 1,024, and the throwaway cluster allows 300, a default server 100), so that no instance fails
// with "too many clients already"; clients then wait for a connection of their instance's pool,
// as a gateway's requests wait for its pool. The operator's pool (4) and a margin for other
// sessions are left out.
func demoConnections(ctx context.Context, ops *pgxpool.Pool, instances, clients int) (int, error) {
	setting := func(name string) (int, error) {
		v, err := db.New().BenchServerSetting(ctx, ops, name)
		if err != nil {
			return 0, fmt.Errorf("read setting %s: %w", name, err)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("setting %s: %w", name, err)
		}
		return n, nil
	}
	maxConns, err := setting("max_connections")
	if err != nil {
		return 0, err
	}
	reserved, err := setting("superuser_reserved_connections")
	if err != nil {
		return 0, err
	}
	const others = 4 + 8 // the operator's pool, other sessions
	each := min(clients, (maxConns-reserved-others)/instances)
	if each < 1 {
		return 0, fmt.Errorf("the server's max_connections (%d) leaves no connection for each of %d instances: lower --instances", maxConns, instances)
	}
	return each, nil
}

// requestedKeys records which of a demo's API keys a client requested with, so that the checks
// at the end read the windows of those keys only: the others hold nothing (every scope key is
// the run's own), and reading each of up to 1,000,000 keys (--keys) took minutes, without a
// line of output.
type requestedKeys []atomic.Bool

func (r requestedKeys) mark(i int)     { r[i].Store(true) }
func (r requestedKeys) has(i int) bool { return r[i].Load() }
