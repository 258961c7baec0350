package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/gooselog"
	"github.com/pgadmit/pgadmit/internal/ticking"
)

// migrateProgressEvery is how often migrate up and down say, on stderr, what a step that is
// still running waits for: the lock row that another migrator holds (for up to 5 minutes), or a
// migration that takes long (an index built on a large table); or that it lost the connection to
// the database while it waited for the lock. Without it they were silent until the step ended.
const migrateProgressEvery = 5 * time.Second

// migrateWatch follows a goose step: holdLock says when it holds the migration lock row
// (schema.Locked took it), then the provider's log records (goose.WithVerbose and goose.WithSlog)
// each statement goose executes with its migration's file, and each migration it completes.
type migrateWatch struct {
	mu      sync.Mutex
	locked  bool      // the step holds the lock
	running string    // file of the migration being applied or reverted, "" between them
	since   time.Time // when running began
	// done lists the migrations the step completed, as goose logs them: goose's own list is lost
	// when the step fails after them (its partial migration error has it), or after the last
	// (reading the version it reached for its log, which an interrupt fails: then it has none).
	done []*goose.MigrationResult
	// migrated, when not nil, is called as each migration completes, with its file (for tests).
	migrated func(source string)
}

// Enabled, WithAttrs and WithGroup make migrateWatch a slog.Handler that sees every record.
func (w *migrateWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *migrateWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *migrateWatch) WithGroup(string) slog.Handler            { return w }

func (w *migrateWatch) Handle(_ context.Context, r slog.Record) error {
	done, completed := gooselog.Result(r)
	w.mu.Lock()
	switch {
	case completed:
		w.running = ""
		w.done = append(w.done, done)
	case r.Message == "executing statement":
		var source string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "source" {
				source = a.Value.String()
			}
			return a.Key != "source"
		})
		if source != w.running {
			w.running, w.since = source, time.Now()
		}
	}
	w.mu.Unlock()
	if completed && w.migrated != nil {
		w.migrated(done.Source.Path)
	}
	return nil
}

// completed returns the migrations the step completed, as goose logged them.
func (w *migrateWatch) completed() []*goose.MigrationResult {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.done)
}

// holdLock records that the step holds the migration lock row.
func (w *migrateWatch) holdLock() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.locked = true
}

// report says on out, every interval until the returned stop is called, what the step that
// began at start waits for: the lock, or a migration that has run that long (doing: "applying"
// or "reverting"), as "pgadmit migrate: ..." lines. stop returns once nothing more is written.
func (w *migrateWatch) report(out io.Writer, doing string, start time.Time, interval time.Duration,
	reach func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	stopTicks := ticking.Every(interval, func() {
		w.mu.Lock()
		locked, running, since := w.locked, w.running, w.since
		w.mu.Unlock()
		// A migration that began since the last line has not been long yet: it is said at the
		// next, so that a quick run prints nothing.
		switch {
		case !locked:
			fmt.Fprint(out, w.lockWait(ctx, start, interval, reach))
		case running != "" && time.Since(since) >= interval:
			fmt.Fprintf(out, "pgadmit migrate: still %s %s after %s\n", doing, running, time.Since(since).Round(time.Second))
		}
	})
	return func() {
		cancel() // a reach in flight
		stopTicks()
	}
}

// lockWait says what the wait for the lock since start waits for: the lock row another migrator
// holds, or, when reach finds that the database no longer answers (within interval), the
// database. goose's locker tries again every second after a lock row held, a lost connection or
// a connection attempt that timed out, for up to 5 minutes (300 tries): a wait for a database that is gone must not be told as one
// for another migrator. A database that does not answer at all holds the locker's statement
// (goose gives it no deadline): no later try, and no end of the 5 minutes, only Ctrl-C. It says
// nothing ("") when the step ended (ctx) or took the lock while reach ran.
func (w *migrateWatch) lockWait(ctx context.Context, start time.Time, interval time.Duration, reach func(context.Context) error) string {
	rctx, done := context.WithTimeout(ctx, interval)
	err := reach(rctx)
	// pgx says only "context deadline exceeded" of a database that does not answer.
	silent := err != nil && errors.Is(rctx.Err(), context.DeadlineExceeded)
	done()
	w.mu.Lock()
	locked := w.locked
	w.mu.Unlock()
	if ctx.Err() != nil || locked {
		return ""
	}
	waited := time.Since(start).Round(time.Second)
	switch {
	case silent:
		return fmt.Sprintf("pgadmit migrate: waited %s for the migration lock, but the database did not answer within %s; "+
			"it waits for an answer (Ctrl-C stops the wait)\n", waited, interval)
	case err != nil:
		return fmt.Sprintf("pgadmit migrate: waited %s for the migration lock, but lost the connection to the database (%s); "+
			"it keeps trying until the wait ends after 5m, or at Ctrl-C\n", waited, err)
	}
	return fmt.Sprintf("pgadmit migrate: waited %s for the migration lock, which another migrator holds "+
		"(one that died frees it within 30s; the wait ends after 5m, or at Ctrl-C)\n", waited)
}
