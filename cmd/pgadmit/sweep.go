package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// sweep runs Recover every interval until ctx ends, logging each pass. A database it cannot
// reach, at start or later, is logged and tried again at the next interval. lockTimeout is the
// bound that opts give a batch's wait for a lock, for the log of a pass that gave up. metrics, when
// not nil (--http), counts each pass, and each try that could not open the pool, and exports the
// pool once it is open.
func sweep(ctx context.Context, a *app, metrics *sweepMetrics, every, passTimeout, lockTimeout time.Duration, opts ...ratelimit.MaintenanceOption) error {
	cfg, err := a.poolConfig(a.dsn, 2)
	if err != nil {
		return err // a bad URL: no retry will mend it
	}
	// A sweeper whose log cannot be written (a full disk, a reader that went away) stops: it
	// would sweep on unseen, every pass and every failure of one unlogged, and whatever
	// supervises it would see it run. Exit 1 (runApp's outputWriter) tells the supervisor.
	var lost error
	logf := func(format string, args ...any) {
		_, err := fmt.Fprintf(a.stdout, "%s %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
		if lost == nil {
			lost = err
		}
	}
	logf("recover: sweeping every %s (stop with Ctrl-C or SIGTERM)", durationtext.Operator(every))
	if lost != nil {
		return lost
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	var pool *pgxpool.Pool
	var o *oneShot                   // pool's: an interrupted pass is waited for endWait at most
	var maint *ratelimit.Maintenance // one for every pass: it takes back a lease a failed pass left
	defer func() {
		if o != nil {
			o.close()
		}
	}()
	for {
		if pool == nil {
			began := time.Now()
			var err error
			if pool, err = a.open(ctx, a.dsn, cfg.Copy()); err != nil && ctx.Err() == nil {
				// A try that cannot connect is a failed run, as metrics.Recover counts one whose
				// Recover cannot: error, or timeout for a server that did not answer in time.
				metrics.observe(ratelimit.RecoveryResult{}, err, time.Since(began))
				logf("recover: %s; trying again in %s", err, durationtext.Operator(every))
			}
			if pool != nil {
				o = &oneShot{pctx: ctx, pool: pool}
				maint = ratelimit.NewMaintenance(pool, opts...)
				if err := metrics.addPool(pool); err != nil {
					a.warn("the pool's metrics are not served: %s", err)
				}
				a.sweepChecks(ctx, o, passTimeout)
			}
		}
		if pool != nil {
			recoverPass(ctx, o, maint, metrics, passTimeout, lockTimeout, logf, a.dsn)
		}
		if lost != nil {
			return lost
		}
		select {
		case <-ctx.Done():
			logf("recover: stopped")
			return nil
		case <-ticker.C:
		}
	}
}

// sweepChecks checks, as the sweeper starts on a new pool (o's), the schema version and the
// connection pooler, warning of what is wrong. They are bounded by passTimeout, as a pass is,
// and waited for endWait at most once that bound or ctx ended (o.within): on a server that
// stopped answering they hung the sweeper, its passes never run. CheckPooler now ends about 1s
// after its context does; o.within stays as the backstop of a check that would not. Given up
// on, they run on in the background, and what they find then is not said.
func (a *app) sweepChecks(ctx context.Context, o *oneShot, passTimeout time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	var warnings []string
	warn := func(format string, args ...any) { warnings = append(warnings, fmt.Sprintf(format, args...)) }
	returned := o.within(cctx, func() {
		if _, behind := checkOperatorSchema(cctx, o.pool, warn); behind != "" {
			warn("%s", behind)
		}
		// A connection string that does not suit a transaction pooler works while the sweeper
		// has the pooler to itself, and fails once other clients share it: say so now, as
		// doctor does, not months later.
		if err := ratelimit.CheckPooler(cctx, o.pool); errors.Is(err, ratelimit.ErrPoolerMismatch) || errors.Is(err, ratelimit.ErrStatementPooling) {
			warn("%s", scrub(err.Error(), a.dsn))
		}
	})
	if returned {
		for _, w := range warnings {
			a.warn("%s", w)
		}
	}
	if ctx.Err() == nil && cctx.Err() != nil {
		a.warn("the start-up checks (the schema version, the connection pooler) were cut off by --pass-timeout (%s): not checked",
			durationtext.Operator(passTimeout))
	}
}

// recoverPass runs one pass of the sweeper and logs it. A pass that hangs (a server that
// stopped answering, a lock held for ever) must not stop the sweeper: after passTimeout it is
// cut off, and the next pass goes on where it stopped. Interrupted, it is waited for endWait at
// most (o.run), as a one-shot recover is: on a frozen server it took 6-7 s more. metrics counts
// the pass as metrics.Recover counts a run, when it ends.
func recoverPass(ctx context.Context, o *oneShot, maint *ratelimit.Maintenance, metrics *sweepMetrics, passTimeout, lockTimeout time.Duration, logf func(string, ...any), dsn string) {
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, passTimeout)
	defer cancel()
	var res ratelimit.RecoveryResult
	var err error
	if !o.run(func() {
		began := time.Now()
		res, err = maint.Recover(pctx)
		metrics.observe(res, err, time.Since(began))
	}) {
		logf("recover: stopped mid-pass: %s", leaseLeft("the interrupt"))
		return
	}
	line, ok := passReport(res, err, start)
	if ctx.Err() != nil {
		// Stopping: the sweeper says so itself, and the pass did not fail. What it gave back
		// before the signal is still given back, and said.
		if ok && err != nil {
			logf("recover: %s; stopped mid-pass", line)
		} else if ok {
			logf("recover: %s", line)
		}
		return
	}
	if ok {
		logf("recover: %s", line)
	}
	if err != nil {
		err = readOnlyAdvice(privilegeDenied(passLockWaited(notMigrated(pctx, o.pool, err), lockTimeout), "recover", ok))
		logf("recover: pass failed: %s", scrub(cutOff(ctx, pctx, passTimeout, err).Error(), dsn))
	}
}
