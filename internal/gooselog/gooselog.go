// Package gooselog reads goose's log of a migration run (goose.WithVerbose and goose.WithSlog):
// goose returns no results when a step fails after its last migration (an interrupt as it reads
// the version it reached), and its partial error only those before a failed one, but it logs
// each migration as it completes it.
package gooselog

import (
	"log/slog"
	"time"

	"github.com/pressly/goose/v3"
)

// Completed is the message of goose's record of a migration it completed.
const Completed = "migration completed"

// Result returns the migration that r, a record of goose's log, says goose completed (its file,
// version, type, direction, duration and whether it was empty), and false for any other record.
func Result(r slog.Record) (*goose.MigrationResult, bool) {
	if r.Message != Completed {
		return nil, false
	}
	res := &goose.MigrationResult{Source: &goose.Source{}}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "source":
			res.Source.Path = a.Value.String()
		case "version":
			if a.Value.Kind() == slog.KindInt64 {
				res.Source.Version = a.Value.Int64()
			}
		case "type":
			res.Source.Type = goose.MigrationType(a.Value.String())
		case "direction":
			res.Direction = a.Value.String()
		case "duration_seconds":
			if a.Value.Kind() == slog.KindFloat64 {
				res.Duration = time.Duration(a.Value.Float64() * float64(time.Second))
			}
		case "state":
			res.Empty = a.Value.String() == "empty"
		}
		return true
	})
	return res, true
}
