package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/plural"
	"github.com/pgadmit/pgadmit/internal/textcell"
)

// ProblemKind names one kind of inconsistency Doctor finds.
type ProblemKind string

// The kinds of problems Doctor reports.
const (
	// ProblemCounterReserved: a counter's reserved value is not the sum of
	// its open reservations and its open allotments' granted units
	// (Expected is that sum, Actual the counter's).
	ProblemCounterReserved ProblemKind = "counter_reserved_mismatch"
	// ProblemCounterUsed: a counter's used value is not the sum of its
	// committed reservations' actual amounts and its returned allotments'
	// used amounts.
	ProblemCounterUsed ProblemKind = "counter_used_mismatch"
	// ProblemReservationWithoutCounter: an open reservation whose counter
	// row is gone; its amount is held nowhere.
	ProblemReservationWithoutCounter ProblemKind = "open_reservation_without_counter"
	// ProblemAllotmentWithoutCounter: an open allotment (a block of a Local
	// limit) whose counter row is gone; its granted units are held nowhere
	// and its return charges nothing. Actual is its granted units.
	ProblemAllotmentWithoutCounter ProblemKind = "open_allotment_without_counter"
	// ProblemReservationLifeCycle: a reservation whose status, finalized_at
	// and actual_amount disagree (written by something other than pgadmit's
	// functions). Actual is its actual amount.
	ProblemReservationLifeCycle ProblemKind = "reservation_life_cycle_broken"
	// ProblemAllotmentOutlivedWindow: an allotment (a block of a Local
	// limit) still open well after its window ended: its holder died
	// without returning it (Recover returns it, charging the holder's last
	// report). Actual is its granted units.
	ProblemAllotmentOutlivedWindow ProblemKind = "allotment_outlived_window"
	// ProblemReservationOfFinishedTask: a finished task still holds an open
	// reservation (Recover releases it).
	ProblemReservationOfFinishedTask ProblemKind = "open_reservation_of_finished_task"
	// ProblemLeaseOfFinishedTask: a finished task still holds a live
	// concurrency lease (Recover releases it).
	ProblemLeaseOfFinishedTask ProblemKind = "live_lease_of_finished_task"
	// ProblemAdmissionOfFinishedTask: a finished task still takes a queue
	// place (Recover deletes it).
	ProblemAdmissionOfFinishedTask ProblemKind = "admission_of_finished_task"
	// ProblemAttemptOfFinishedTask: a finished task has an attempt still
	// marked running (Recover fails it).
	ProblemAttemptOfFinishedTask ProblemKind = "running_attempt_of_finished_task"
	// ProblemReservationOfFinishedAttempt: an open reservation is attached
	// to an attempt that is over, while its task is not finished: a dead
	// worker's admission that committed after recovery reclaimed its task
	// (Recover releases it). AttemptID names the attempt.
	ProblemReservationOfFinishedAttempt ProblemKind = "open_reservation_of_finished_attempt"
	// ProblemLeaseOfFinishedAttempt: a live concurrency lease is attached to
	// an attempt that is over, while its task is not finished (Recover
	// releases it). AttemptID names the attempt.
	ProblemLeaseOfFinishedAttempt ProblemKind = "live_lease_of_finished_attempt"
)

// Recoverable reports whether Recover repairs problems of this kind (it
// gives back capacity that finished tasks or attempts, or dead holders of
// allotments, still hold). The
// other kinds are damage to the books that needs an operator.
func (k ProblemKind) Recoverable() bool {
	switch k {
	case ProblemAllotmentOutlivedWindow, ProblemReservationOfFinishedTask, ProblemLeaseOfFinishedTask, ProblemAdmissionOfFinishedTask,
		ProblemAttemptOfFinishedTask, ProblemReservationOfFinishedAttempt, ProblemLeaseOfFinishedAttempt:
		return true
	}
	return false
}

// DoctorMaxProblems is the most problems one report lists; Report.Truncated
// says when there were more.
const DoctorMaxProblems = 1000

// Report is what Doctor found.
type Report struct {
	// CheckedAt is the database's clock when the books were read (all checks
	// read one snapshot).
	CheckedAt time.Time
	// Problems lists what does not balance, ordered by Kind, scope, metric
	// and window; none when the books balance.
	Problems []Problem
	// Truncated is true when more than DoctorMaxProblems problems exist.
	Truncated bool
}

// OK reports whether the books were checked and balance. It is false for
// the zero Report, which Doctor returns with its error: nothing was checked.
func (r Report) OK() bool { return r.checked() && len(r.Problems) == 0 }

// checked reports whether r is a Doctor's reading of the books, not the
// zero Report returned with an error.
func (r Report) checked() bool { return !r.CheckedAt.IsZero() }

// String lists the problems, one per line (Problem.String), or says the
// books balance. The zero report, which Doctor returns with an error, says
// that the books were not checked. A report of two problems (its Example's
// output):
//
//	doctor: 2 problems
//	  counter_reserved_mismatch: api_key:key_123 tokens, window 1m from 2026-12-07T07:59:00Z: expected 500, actual 501
//	  open_reservation_of_finished_task: api_key:key_123 requests, task task_1 (succeeded), row res_9: expected 0, actual 1
func (r Report) String() string {
	if !r.checked() && len(r.Problems) == 0 {
		return "doctor: the books were not checked"
	}
	if r.OK() {
		return "doctor: the books balance"
	}
	var b strings.Builder
	b.WriteString("doctor: " + plural.Count(len(r.Problems), "problem", "problems"))
	if r.Truncated {
		b.WriteString(" (truncated)")
	}
	for _, p := range r.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Problem is one inconsistency. Fields that do not apply to its Kind are
// zero.
type Problem struct {
	// Kind is what is wrong; Kind.Recoverable says whether Recover repairs it.
	Kind ProblemKind
	// ScopeType, ScopeKey and Metric name the counter or scope at fault
	// (Metric concurrent for a lease, queue_size for a queue place); empty
	// for a running attempt.
	ScopeType string
	ScopeKey  string
	Metric    string
	// Window and WindowStart identify a counter window.
	Window      time.Duration
	WindowStart time.Time
	// TaskID is the task the row at fault belongs to (empty when none), and
	// TaskStatus that task's status where the check read it.
	TaskID     string
	TaskStatus string
	// RowID is the reservation, lease, attempt or block (allotment) at
	// fault.
	RowID string
	// AttemptID is the finished attempt that a reservation or lease of the
	// *_of_finished_attempt kinds is attached to.
	AttemptID string
	// Expected and Actual are the amounts the books should hold and do
	// hold (which amounts, each Kind says), as the nearest float64s. The
	// database keeps them exactly, in numeric, and may need more digits
	// than a float64 holds: a counter 1e-9 off a sum of 1e14 and 1e-9 has
	// Expected and Actual both 1e14. Compare or show ExpectedText and
	// ActualText instead.
	Expected float64
	Actual   float64
	// ExpectedText and ActualText are Expected and Actual exactly, as
	// numeric's text without trailing zeros ("100000000000000.000000001",
	// "1", "0"); Doctor always sets them. Parse them with big.Rat.SetString.
	ExpectedText string
	ActualText   string
}

// String describes the problem on one line, for logs and the CLI: its
// kind, where it is (scope and metric, window, task, attempt, row: those
// it has) and its amounts (its Example's output):
//
//	counter_used_mismatch: api_key:key_123 tokens, window 1h from 2026-12-07T07:00:00Z: expected 420, actual 0.5
func (p Problem) String() string {
	var where []string
	if p.ScopeType != "" {
		where = append(where, textcell.Scope(p.ScopeType, p.ScopeKey)+" "+textcell.Show(p.Metric))
	}
	if p.Window > 0 {
		where = append(where, fmt.Sprintf("window %s from %s", durationtext.Operator(p.Window), p.WindowStart.UTC().Format(time.RFC3339)))
	}
	if p.TaskID != "" {
		where = append(where, fmt.Sprintf("task %s (%s)", p.TaskID, p.TaskStatus))
	}
	if p.AttemptID != "" {
		where = append(where, "attempt "+p.AttemptID)
	}
	if p.RowID != "" {
		where = append(where, "row "+p.RowID)
	}
	return fmt.Sprintf("%s: %s: expected %s, actual %s", p.Kind, strings.Join(where, ", "), amountText(p.ExpectedText, p.Expected),
		amountText(p.ActualText, p.Actual))
}

// amountText is an amount of a Problem as String shows it: its exact text
// when it has one (Doctor sets it), else its float64 in full and without
// an exponent (amounttext.Full), as numeric's text would be (a Problem a
// caller built).
func amountText(text string, f float64) string {
	if text != "" {
		return text
	}
	return amounttext.Full(f)
}

// Doctor checks the books, that every counter equals its ledger and that
// nothing finished still holds capacity, and reports the problems it
// finds; it writes nothing.
//
// It checks in one statement (one snapshot of a live database): for every
// counter, reserved equals the sum of its open
// reservations and open Local blocks (allotments), and used the sum of its
// committed actual amounts and returned blocks' used amounts; no open
// reservation or block lacks its counter; every reservation's status,
// finalized_at and actual_amount agree; no block is still open past its
// window and the lost-holder grace (WithLostAllotmentGrace); no finished
// task still holds an open reservation, a live lease, a queue admission or
// a running attempt; and no attempt that is over still holds an open
// reservation or a live lease (after Recover has run, there should be none
// of the kinds it repairs: ProblemKind.Recoverable). It costs one round
// trip whatever it finds (with WithDoctorLockTimeout or
// WithMaintenanceLockTimeout in pgx's exec modes that prepare a statement
// first, its default among them, four: its transaction's begin, setting
// and end): Report.CheckedAt is that statement's time. Full scans of the
// counters, the reservation ledger and the blocks (and, as the planner
// goes, of the tasks): an operator's tool, not for a hot path.
func (m *Maintenance) Doctor(ctx context.Context) (Report, error) {
	if err := m.callable(ctx); err != nil {
		return Report{}, err
	}
	return m.doctor(ctx, m.doctorConn())
}

// doctorConn is what Doctor's statement goes through: the pool behind
// Doctor's lock bound (WithDoctorLockTimeout, else
// WithMaintenanceLockTimeout's).
func (m *Maintenance) doctorConn() Executor {
	bound := m.opts.doctorLockTimeout
	if bound <= 0 { // WithMaintenanceLockTimeout bounds Doctor too, unless it has its own
		bound = m.opts.lockTimeout
	}
	return m.lockConn(bound)
}

// doctor is Doctor's statement, run on conn: m's pool, behind Doctor's
// lock bound if it has one (lockConn).
func (m *Maintenance) doctor(ctx context.Context, conn db.DBTX) (Report, error) {
	now := m.opts.clock.at()
	rows, err := m.queries.DoctorCheck(ctx, conn, db.DoctorCheckParams{
		MaxProblems: DoctorMaxProblems + 1, AllotmentGraceSeconds: m.opts.lostGrace.Seconds(), Now: now,
	})
	if err != nil {
		return Report{}, wrapDBError(ctx, "doctor", err)
	}
	if len(rows) == 0 { // the statement always returns a row: its checked_at
		return Report{}, fmt.Errorf("ratelimit: doctor: no row returned")
	}
	r := Report{CheckedAt: rows[0].CheckedAt}
	if rows[0].Kind == "" { // no problem: the row only carries checked_at
		return r, nil
	}
	if len(rows) > DoctorMaxProblems {
		rows, r.Truncated = rows[:DoctorMaxProblems], true
	}
	r.Problems = make([]Problem, len(rows))
	for i, row := range rows {
		r.Problems[i] = problemFromRow(row)
	}
	return r, nil
}

func problemFromRow(row db.DoctorCheckRow) Problem {
	p := Problem{
		Kind: ProblemKind(row.Kind), ScopeType: row.ScopeType, ScopeKey: row.ScopeKey, Metric: row.Metric,
		TaskID: idString(row.TaskID), TaskStatus: row.TaskStatus.String, RowID: idString(row.RowID),
		AttemptID: idString(row.AttemptID), Expected: row.Expected, Actual: row.Actual,
		ExpectedText: row.ExpectedText, ActualText: row.ActualText,
	}
	if row.WindowSeconds > 0 {
		p.Window = time.Duration(row.WindowSeconds) * time.Second
		p.WindowStart = row.WindowStart
	}
	return p
}
