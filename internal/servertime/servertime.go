// Package servertime tells where a PostgreSQL server spends its time, per statement, from the
// pg_stat_statements extension: how often each statement ran, how often it was planned, and
// its mean planning and execution time per call, for statements a client sent (top-level) and
// for those nested in functions, such as the bodies of pgadmit's PL/pgSQL admission functions.
//
// The extension is optional: its library must be in the server's shared_preload_libraries.
// [Prepare] says whether it can report, and why not; [Take] reads a snapshot, and
// [Snapshot.Since] subtracts an earlier one, so nothing is ever reset:
//
//	st, err := servertime.Prepare(ctx, conn) // conn: a connection the caller keeps for Take
//	if err != nil || !st.Available {
//		return // st.Reason says why, e.g. "pg_stat_statements is not loaded"
//	}
//	before, err := servertime.Take(ctx, conn)
//	// ... run the workload on connections with st.SessionSettings() ...
//	after, err := servertime.Take(ctx, conn)
//	top := after.Since(before) // most server time first
package servertime

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
)

// ReasonNotLoaded is Status.Reason when the server did not load pg_stat_statements.
const ReasonNotLoaded = "pg_stat_statements is not loaded"

// The tracking settings of pg_stat_statements that SessionSettings asks for: every statement,
// also those nested in functions, with its planning timed. Both are superuser-settable.
const (
	settingTrack         = "pg_stat_statements.track"
	settingTrackPlanning = "pg_stat_statements.track_planning"
)

// Status says whether pg_stat_statements can report in a database, and how it tracks.
type Status struct {
	// Available is true when the statistics can be read.
	Available bool `json:"available"`
	// Reason says why not, when Available is false: ReasonNotLoaded, or another sentence.
	Reason string `json:"reason,omitempty"`
	// Version is the version of the extension in the database ("" when it is not created).
	Version string `json:"extension_version,omitempty"`
	// Created is true when Prepare created the extension.
	Created bool `json:"created,omitempty"`
	// CanTrack is true when the role may set pg_stat_statements.track and track_planning for
	// its sessions (a superuser, or a role granted SET on them), so SessionSettings can ask
	// for nested statements and planning times.
	CanTrack bool `json:"can_track"`
	// Track and TrackPlanning are the server's settings, as a new session gets them.
	Track         string `json:"track,omitempty"`
	TrackPlanning string `json:"track_planning,omitempty"`
}

// SessionSettings returns the run-time parameters that make a session's statements fully
// tracked (nested ones too, with planning timed), for the connection configuration of the
// sessions to measure; nil when they cannot be set.
func (s Status) SessionSettings() map[string]string {
	if !s.Available || !s.CanTrack {
		return nil
	}
	return map[string]string{settingTrack: "all", settingTrackPlanning: "on"}
}

// Tracking returns how the sessions configured with SessionSettings are tracked: which
// statements ("top", "all") and whether planning is timed ("on", "off").
func (s Status) Tracking() (track, planning string) {
	if set := s.SessionSettings(); set != nil {
		return set[settingTrack], set[settingTrackPlanning]
	}
	return s.Track, s.TrackPlanning
}

// Prepare readies pg_stat_statements in conn's database and reports whether it can report.
// When the library is loaded but the extension is not created in the database, it creates it
// (which needs a superuser). It reports CanTrack when the role may set the tracking settings,
// which it checks with a transaction-local set_config: it changes no session state, which
// behind a transaction-pooling proxy would stay on a server session other clients get next.
// (The snapshots' own statements are tracked like any other; Since leaves them out.) conn
// should be a single connection that the caller then uses for Take. Unavailability is a
// Status, not an error; the error is for a database that fails otherwise.
func Prepare(ctx context.Context, conn db.DBTX) (Status, error) {
	q := db.New()
	p, err := q.BenchStatementStatsProbe(ctx, conn)
	if err != nil {
		return Status{}, fmt.Errorf("probe pg_stat_statements: %w", err)
	}
	st := Status{Version: p.CreatedVersion, Track: p.Track, TrackPlanning: p.TrackPlanning}
	if !p.Loaded {
		st.Reason = ReasonNotLoaded
		return st, nil
	}
	if st.Version == "" {
		if !p.Available {
			st.Reason = "pg_stat_statements is loaded but its extension files are not installed"
			return st, nil
		}
		if err := q.BenchStatementStatsCreate(ctx, conn); err != nil {
			if msg, ok := serverMessage(err); ok {
				st.Reason = "the pg_stat_statements extension could not be created: " + msg
				return st, nil
			}
			return st, fmt.Errorf("creating the pg_stat_statements extension: %w", err)
		}
		if p, err = q.BenchStatementStatsProbe(ctx, conn); err != nil {
			return st, fmt.Errorf("probe pg_stat_statements: %w", err)
		}
		st.Created, st.Version = true, p.CreatedVersion
	}

	err = q.BenchStatementTrackingSet(ctx, conn, db.BenchStatementTrackingSetParams{Track: "none", TrackPlanning: "off"})
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		st.CanTrack = true
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
	default:
		return st, fmt.Errorf("set pg_stat_statements tracking: %w", err)
	}

	// A first read proves the statistics can be read (an extension older than 1.9 has no
	// toplevel column; a role may lack EXECUTE on the function).
	if _, err := Take(ctx, conn); err != nil {
		if msg, ok := serverMessage(err); ok {
			st.Reason = "cannot read pg_stat_statements: " + msg
			return st, nil
		}
		return st, err
	}
	st.Available = true
	return st, nil
}

// serverMessage returns the message of an error the server returned.
func serverMessage(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", false
	}
	return pgErr.Message + " (SQLSTATE " + pgErr.Code + ")", true
}
