package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// doctorReport is doctor's --json document. It is written only when the check ran to its end
// (the books read, or the connection found unfit for pgadmit, which stops doctor before the
// books): a run that could not reach the database, was refused, cut off or interrupted writes
// none, so that a script tells "problems found" (a document, ok false) from "not checked" (no
// document, the error on stderr), both exit 1. Every field is always there (none is left out).
type doctorReport struct {
	// OK is true when the books were checked and balance, and the connection suits pgadmit
	// (exit 0).
	OK bool `json:"ok"`
	// BooksChecked is false when the connection's check stopped doctor before the books (a
	// transaction pooler that the connection string does not suit: Pooler says so).
	BooksChecked bool `json:"books_checked"`
	// SchemaVersion is the database's pgadmit schema version, null when it could not be read.
	SchemaVersion *int64 `json:"schema_version"`
	// CheckedAt is the database's clock when the books were read (null when they were not).
	CheckedAt *time.Time `json:"checked_at"`
	// DurationSeconds is how long the run took, connecting included.
	DurationSeconds float64 `json:"duration_s"`
	// Problems is what does not balance, in the library's order ([] when none).
	Problems []doctorProblemJSON `json:"problems"`
	// Truncated: there were more problems than the report lists (ratelimit.DoctorMaxProblems).
	Truncated bool `json:"truncated"`
	// Recoverable counts the problems `pgadmit recover` repairs.
	Recoverable int `json:"recoverable"`
	// Pooler is what the connection's check said, null when the connection suits pgadmit.
	Pooler *doctorPoolerJSON `json:"pooler"`
}

// doctorProblemJSON is one ratelimit.Problem. Fields that do not apply to its kind are "", 0 or
// null, as in the library's Problem.
type doctorProblemJSON struct {
	Kind          string     `json:"kind"`
	Recoverable   bool       `json:"recoverable"`
	ScopeType     string     `json:"scope_type"`
	ScopeKey      string     `json:"scope_key"`
	Metric        string     `json:"metric"`
	WindowSeconds float64    `json:"window_s"`
	WindowStart   *time.Time `json:"window_start"`
	TaskID        string     `json:"task_id"`
	TaskStatus    string     `json:"task_status"`
	RowID         string     `json:"row_id"`
	AttemptID     string     `json:"attempt_id"`
	// Expected and Actual are JSON numbers with every digit the database holds (numeric's
	// text: Problem.ExpectedText and ActualText), which a float64 may not.
	Expected json.Number `json:"expected"`
	Actual   json.Number `json:"actual"`
}

// doctorPoolerJSON is what the connection's check (ratelimit.CheckPooler) found wrong: Kind is
// pooler_unknown (it could not tell: doctor goes on), statement_pooling or pooler_mismatch
// (doctor stops: exit 1), Message what doctor prints, what to add to the connection string.
type doctorPoolerJSON struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// poolerKind names CheckPooler's finding for doctor --json.
func poolerKind(err error) string {
	switch {
	case errors.Is(err, ratelimit.ErrPoolerUnknown):
		return "pooler_unknown"
	case errors.Is(err, ratelimit.ErrStatementPooling):
		return "statement_pooling"
	}
	return "pooler_mismatch"
}

// doctorJSON fills doc (schema version, timing and pooler already set) from a Doctor report.
func doctorJSON(doc *doctorReport, rep ratelimit.Report) {
	doc.BooksChecked = true
	doc.OK = rep.OK()
	if !rep.CheckedAt.IsZero() {
		at := rep.CheckedAt.UTC()
		doc.CheckedAt = &at
	}
	doc.Truncated = rep.Truncated
	for _, p := range rep.Problems {
		j := doctorProblemJSON{Kind: string(p.Kind), Recoverable: p.Kind.Recoverable(), ScopeType: p.ScopeType, ScopeKey: p.ScopeKey,
			Metric: p.Metric, WindowSeconds: p.Window.Seconds(), TaskID: p.TaskID, TaskStatus: p.TaskStatus, RowID: p.RowID, AttemptID: p.AttemptID,
			Expected: exactAmount(p.ExpectedText, p.Expected), Actual: exactAmount(p.ActualText, p.Actual)}
		if !p.WindowStart.IsZero() {
			start := p.WindowStart.UTC()
			j.WindowStart = &start
		}
		if j.Recoverable {
			doc.Recoverable++
		}
		doc.Problems = append(doc.Problems, j)
	}
}

// exactAmount is an amount as a JSON number: numeric's exact text when there is one, else the
// float64's shortest text.
func exactAmount(text string, f float64) json.Number {
	if text != "" {
		return json.Number(text)
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
}
