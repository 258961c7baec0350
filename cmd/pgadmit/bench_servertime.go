package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/bench"
	"github.com/pgadmit/pgadmit/internal/servertime"
)

// benchServerTime follows where the server's time goes during `pgadmit bench`, workload by
// workload, from pg_stat_statements snapshots taken around each workload on a connection of
// its own. A nil *benchServerTime (--statements 0) does nothing.
type benchServerTime struct {
	top    int               // statements per workload in the report
	conn   *pgxpool.Conn     // the snapshots' connection
	status servertime.Status // what Prepare found
	// refused, when not "", says why the workers' sessions run with the server's tracking
	// although the role may set it.
	refused string
	before  servertime.Snapshot // taken before the running workload
	// Per workload name, in the order they ran: the statements of all its rounds so far.
	order []string
	spent map[string][]servertime.Statement
}

// serverTimeReport is the server_time field of bench's --json document.
type serverTimeReport struct {
	servertime.Status
	// SessionTrack and SessionTrackPlanning are the settings the workloads' sessions ran with.
	SessionTrack         string `json:"session_track,omitempty"`
	SessionTrackPlanning string `json:"session_track_planning,omitempty"`
	// SessionSettingsRefused says why the sessions run with the server's settings although
	// the role may set them (a connection pooler refused them).
	SessionSettingsRefused string                   `json:"session_settings_refused,omitempty"`
	Workloads              []workloadServerTimeJSON `json:"workloads,omitempty"`
}

// workloadServerTimeJSON is the server time of one workload over all its rounds.
type workloadServerTimeJSON struct {
	Workload string `json:"workload"`
	Rounds   int    `json:"rounds"`
	Ops      int64  `json:"ops"`
	// ServerMs is the time of the top-level statements (which includes the nested ones'),
	// in milliseconds; ServerUsPerOp divides it by the operations, in microseconds.
	ServerMs      float64 `json:"server_ms"`
	ServerUsPerOp float64 `json:"server_us_per_op"`
	// Statements are the ones that took the most time, top-level and nested, most first.
	Statements []servertime.Statement `json:"statements"`
}

// startServerTime readies pg_stat_statements on a connection of pool, which it keeps until
// close, and reports top statements per workload (top > 0).
func startServerTime(ctx context.Context, pool *pgxpool.Pool, top int) (*benchServerTime, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	st, err := servertime.Prepare(ctx, conn)
	if err != nil {
		conn.Release()
		return nil, err
	}
	return &benchServerTime{top: top, conn: conn, status: st, spent: map[string][]servertime.Statement{}}, nil
}

// close gives the connection back.
func (s *benchServerTime) close() {
	if s != nil {
		s.conn.Release()
	}
}

// sessionSettings returns the run-time parameters for the workloads' sessions: full tracking
// when the role may set it, else none.
func (s *benchServerTime) sessionSettings() map[string]string {
	if s == nil || s.refused != "" {
		return nil
	}
	return s.status.SessionSettings()
}

// beforeWorkload takes the snapshot a workload's statements are measured from.
func (s *benchServerTime) beforeWorkload(ctx context.Context, _ bench.Workload, _ int) error {
	if s == nil || !s.status.Available {
		return nil
	}
	var err error
	s.before, err = servertime.Take(ctx, s.conn)
	return err
}

// afterWorkload adds what ran since beforeWorkload to the workload's statements.
func (s *benchServerTime) afterWorkload(ctx context.Context, r bench.Result) error {
	if s == nil || !s.status.Available {
		return nil
	}
	after, err := servertime.Take(ctx, s.conn)
	if err != nil {
		return err
	}
	if _, ok := s.spent[r.Name]; !ok {
		s.order = append(s.order, r.Name)
	}
	s.spent[r.Name] = servertime.Add(s.spent[r.Name], after.Since(s.before))
	return nil
}

// report returns the server time of each workload, its top statements attributed to pgadmit's
// functions, with the operations and rounds of results.
func (s *benchServerTime) report(ctx context.Context, results []bench.Result) (*serverTimeReport, error) {
	if s == nil {
		return nil, nil
	}
	rep := &serverTimeReport{Status: s.status}
	rep.SessionTrack, rep.SessionTrackPlanning = s.status.Tracking()
	if s.refused != "" {
		rep.SessionTrack, rep.SessionTrackPlanning = s.status.Track, s.status.TrackPlanning
		rep.SessionSettingsRefused = s.refused
	}
	if !s.status.Available {
		return rep, nil
	}
	funcs, err := servertime.Functions(ctx, s.conn)
	if err != nil {
		return nil, err
	}
	for _, name := range s.order {
		all := s.spent[name]
		w := workloadServerTimeJSON{Workload: name, ServerMs: servertime.TopLevelMs(all), Statements: []servertime.Statement{}}
		for _, r := range results {
			if r.Name == name {
				w.Rounds++
				w.Ops += r.Ops
			}
		}
		if w.Ops > 0 {
			w.ServerUsPerOp = w.ServerMs * 1000 / float64(w.Ops)
		}
		// Statements planned but never executed are PL/pgSQL expressions the function
		// evaluates without the executor: their planning is part of their caller's time.
		for _, st := range all {
			if st.Calls > 0 && len(w.Statements) < s.top {
				w.Statements = append(w.Statements, st)
			}
		}
		servertime.Attribute(w.Statements, funcs)
		rep.Workloads = append(rep.Workloads, w)
	}
	return rep, nil
}

// printServerTime prints the server-time report under the bench table.
func printServerTime(w io.Writer, rep *serverTimeReport) {
	if rep == nil {
		return
	}
	fmt.Fprintln(w)
	if !rep.Available {
		fmt.Fprintf(w, "server time per statement: unavailable (%s)\n", rep.Reason)
		if rep.Reason == servertime.ReasonNotLoaded {
			fmt.Fprintln(w, "  (add pg_stat_statements to the server's shared_preload_libraries and restart it, or run\n"+
				"  without DATABASE_URL: the throwaway cluster preloads it)")
		}
		return
	}
	tracked := "top-level and nested statements"
	switch {
	case rep.SessionTrack == "all":
	case rep.SessionSettingsRefused != "":
		tracked = fmt.Sprintf("pg_stat_statements.track is %q: %s; top-level statements only", rep.SessionTrack, rep.SessionSettingsRefused)
	default:
		tracked = fmt.Sprintf("pg_stat_statements.track is %q and this role may not set it: top-level statements only", rep.SessionTrack)
	}
	if rep.SessionTrackPlanning != "on" {
		tracked += "; planning not timed (track_planning off)"
	}
	fmt.Fprintf(w, "server time per statement, from pg_stat_statements %s (%s).\n", rep.Version, tracked)
	fmt.Fprintln(w, "PLAN and EXEC are mean µs per call; PLANS counts actual planning (fewer than CALLS: plans reused);")
	fmt.Fprintln(w, "a top-level statement's time includes that of the statements nested in the functions it calls.")
	for _, wl := range rep.Workloads {
		rounds := ""
		if wl.Rounds > 1 {
			rounds = fmt.Sprintf(" (%d rounds)", wl.Rounds)
		}
		fmt.Fprintf(w, "\n%s%s: %.0f ms of server time, %.0f µs per operation\n", wl.Workload, rounds, wl.ServerMs, wl.ServerUsPerOp)
		if len(wl.Statements) == 0 {
			fmt.Fprintln(w, "  no statements recorded")
			continue
		}
		fmt.Fprintf(w, "  %8s %9s %9s %8s %9s  %s\n", "CALLS", "PLAN µs", "EXEC µs", "PLANS", "TOTAL ms", "STATEMENT")
		for _, st := range wl.Statements {
			fmt.Fprintf(w, "  %8d %9.1f %9.1f %8d %9.1f  %s\n", st.Calls, st.MeanPlanUs, st.MeanExecUs, st.Plans, st.TotalMs(), statementLabel(st))
		}
	}
}

// statementLabel names a statement in the report: a top-level one by its name and the
// function it calls, a nested one indented under the function it runs in.
func statementLabel(st servertime.Statement) string {
	switch {
	case st.TopLevel && st.Function != "":
		return st.Name + " (calls " + st.Function + ")"
	case st.TopLevel:
		return st.Name
	case st.Function != "":
		return "  in " + st.Function + ": " + st.Name
	default:
		return "  nested: " + st.Name
	}
}

// runtimeParams adds params to a connection configuration's run-time parameters.
func runtimeParams(cfg *pgxpool.Config, params map[string]string) {
	maps.Copy(cfg.ConnConfig.RuntimeParams, params)
}

// refusedStartupParameter reports whether err is a connection refused for a startup parameter
// the other end does not know: PgBouncer's "unsupported startup parameter" (SQLSTATE 08P01).
func refusedStartupParameter(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "08P01" && strings.Contains(pgErr.Message, "startup parameter")
}
