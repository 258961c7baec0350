package schema

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/gooselog"
)

// CompletedError is what [Migrate] and [Down] return when they had done every migration they
// had to (Migrate applied every pending one, Down reverted every applied one) and failed only
// after the last, as goose read the version it reached for its log: the schema is where they were
// asked to take it. That is how a context that ends right after the last migration shows: goose
// returns no results then, only that read's failure (that its connection was closed). It
// matches the context's error (errors.Is context.Canceled or context.DeadlineExceeded); a caller
// that must know whether the schema is current looks for a *CompletedError with errors.As.
//
// A Migrate or Down that ends before its last migration is done returns goose's
// *goose.PartialError instead (errors.As), whose Applied lists the migrations done before the
// one that failed, or the error alone when it failed before the first.
type CompletedError struct {
	// Applied lists the migrations done, in the order they were (goose's results; Direction
	// "up" for Migrate, "down" for Down), each with its file, version and duration.
	Applied []*goose.MigrationResult
	// Err is what failed after the last: the context's error when the context ended (goose's
	// own error then says only that its connection was closed), else goose's error.
	Err error
}

// Error says that every migration was done, how many, the last, and what
// failed after (its Example's output; Migrate's error wraps it after
// "schema: migrate up: "):
//
//	applied every pending migration (2, the last 00023_comments_as_they_are.sql), then: context canceled
func (e *CompletedError) Error() string {
	did := "applied every pending migration"
	if len(e.Applied) > 0 && e.Applied[0] != nil && e.Applied[0].Direction == "down" {
		did = "reverted every applied migration"
	}
	// One made by hand may have no results, or results without a Source, or no Err: the message
	// leaves out what it lacks.
	if n := len(e.Applied); n > 0 {
		last := ""
		if e.Applied[n-1] != nil && e.Applied[n-1].Source != nil && e.Applied[n-1].Source.Path != "" {
			last = ", the last " + e.Applied[n-1].Source.Path
		}
		did = fmt.Sprintf("%s (%d%s)", did, n, last)
	}
	if e.Err == nil {
		return did + ", then failed"
	}
	return fmt.Sprintf("%s, then: %v", did, e.Err)
}

func (e *CompletedError) Unwrap() error { return e.Err }

// completing runs step (goose's Up or DownTo, to the end) as withLock does, and returns a
// *CompletedError when it failed after every migration it ran was done: goose fails such a
// step only in the read of the version reached, after the last; a failure of a migration is
// a *goose.PartialError, and one before the first leaves none done. It learns which migrations
// were done from goose's log of them, which it alone reads (pgadmit's provider logs nothing
// otherwise).
func completing(ctx context.Context, pool *pgxpool.Pool, pending func(*goose.Provider) (bool, error),
	step func(*goose.Provider) error) error {
	log := &completions{}
	err := withLock(ctx, pool, []goose.ProviderOption{goose.WithVerbose(true), goose.WithSlog(slog.New(log))}, pending, step)
	var partial *goose.PartialError
	done := log.results()
	if err == nil || len(done) == 0 || errors.As(err, &partial) {
		return err
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	return &CompletedError{Applied: done, Err: err}
}

// completions is a slog.Handler that keeps goose's record of each migration it completed.
type completions struct {
	mu   sync.Mutex
	done []*goose.MigrationResult
}

func (c *completions) Enabled(context.Context, slog.Level) bool { return true }
func (c *completions) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *completions) WithGroup(string) slog.Handler            { return c }

func (c *completions) Handle(_ context.Context, r slog.Record) error {
	if res, ok := gooselog.Result(r); ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.done = append(c.done, res)
	}
	return nil
}

// results returns the migrations completed so far.
func (c *completions) results() []*goose.MigrationResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}
