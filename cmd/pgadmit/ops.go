package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/grace"
)

// defaultPassTimeout is recover --every's --pass-timeout when it is not given; a one-shot run
// has no bound unless it is given (a first prune after months of history may rightly take hours).
const defaultPassTimeout = time.Minute

// passTimeoutFlag adds --pass-timeout to recover, prune, doctor and inspect, 0 when not given
// (usage says the default, which depends on recover's --every).
func passTimeoutFlag(fs *flag.FlagSet, usage string) *time.Duration {
	return fs.Duration("pass-timeout", 0, usage)
}

// checkPassTimeout refuses a --pass-timeout given under minDuration, 0 included: a pass cut
// off at once does nothing (no bound is what leaving it out means).
func checkPassTimeout(fs *flag.FlagSet, d *time.Duration) error {
	if flagGiven(fs, "pass-timeout") {
		return checkDuration("pass-timeout", *d)
	}
	return nil
}

// connectPass connects a one-shot recover, prune, doctor or inspect and reads the schema version
// (connectOperator) within the run's --pass-timeout, pctx (passContext of ctx): they came before
// the bound, and a server that stopped answering while the version was read hung the run for
// ever. A cut-off is an error that names the bound, as one of the pass is, and what the run left
// undone (cutOffLeaving; "": nothing said).
func (a *app) connectPass(ctx, pctx context.Context, passTimeout time.Duration, undone string) (*pgxpool.Pool, error) {
	pool, err := a.connectOperator(pctx)
	if err != nil {
		if errors.Is(err, pctx.Err()) { // open's error is ctx's own then, which says nothing more
			err = fmt.Errorf("connecting: %w", err)
		}
		return nil, cutOffLeaving(ctx, pctx, passTimeout, undone, err)
	}
	if err := pctx.Err(); err != nil {
		grace.CloseOnExit(pctx, pool)
		return nil, cutOffLeaving(ctx, pctx, passTimeout, undone, fmt.Errorf("reading the schema version: %w", err))
	}
	return pool, nil
}

// progressFlag adds --progress to a one-shot recover, prune or doctor (and bench), whose usage
// says what its line tells (says: "how far it has got"). Where the command has --every
// (recover's, defined before it), its help says that --every refuses it (checkProgress); where
// it has a floor (bench's and doctor's: checkInterval), its help states it.
func progressFlag(fs *flag.FlagSet, floor time.Duration, says string) *time.Duration {
	values := "0: never"
	if floor > 0 {
		values += "; else at least " + durationtext.Operator(floor)
	}
	usage := "while the run lasts, print " + says + " on stderr every `interval` (" + values + ")"
	if fs.Lookup("every") != nil {
		usage += "; refused with --every, which logs each pass instead"
	}
	return fs.Duration("progress", 10*time.Second, usage)
}

// checkProgress refuses a negative --progress of recover or prune (which take any other value:
// a line of how far the run has got comes only after a batch, and the one that says that it
// still waits for one every minInterval at most: runProgress), and one given to a sweeper,
// whose passes are each logged already. bench's and doctor's have a floor: checkInterval
// refuses what is under it.
func checkProgress(fs *flag.FlagSet, every time.Duration, sweeper bool) error {
	if every < 0 {
		return usagef("--progress must be >= 0, got %s", durationtext.Operator(every))
	}
	if sweeper && flagGiven(fs, "progress") {
		return usagef("--progress is for a single run; with --every each pass is logged")
	}
	return nil
}
