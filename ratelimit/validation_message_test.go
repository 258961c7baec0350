package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A *ValidationError shows the text it refused quoted and cut short, as
// validateOptionalText always did, wherever the text comes from: an id, a
// token, an async task's Worker, an outcome's Status, a queue limit's
// Metric, blank text, the scope of two limits on one counter or queue, the
// metric an actual amount of Commit is given under. The message stays short, valid UTF-8, on one line
// and without NUL bytes, whatever the caller passed (a header's value, say):
// a malformed id used to be echoed whole and raw, 100 kB, a newline and
// bytes that are not UTF-8 into the caller's log. Nothing is written.
func TestValidationErrorsShowRefusedTextQuotedAndShort(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	running := startSync(t, l, 0)
	before := rowCounts(t, pool)
	const id = "123e4567-e89b-12d3-a456-426614174000"
	bad := "x\nforged log line \xff\xfe\x00" + strings.Repeat("y", 100_000)
	blank := strings.Repeat(" ", 100_000)
	escapes := strings.Repeat("\x1b", ratelimit.MaxScopeBytes) // the longest scope text, each byte shown as 4
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"Reserve task id", func() error { _, err := l.Reserve(ctx, bad, "", nil); return err }, "TaskID"},
		{"Reserve attempt id", func() error { _, err := l.Reserve(ctx, id, bad, nil); return err }, "AttemptID"},
		{"Reserve blank scope key", func() error {
			_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", blank, "requests", 1, 1)})
			return err
		}, "Limits[0].Scope.Key"},
		{"Commit reservation id", func() error {
			_, err := l.Commit(ctx, ratelimit.Grant{Reservations: []ratelimit.Reservation{{ID: bad}}}, nil)
			return err
		}, "Reservations.ID[0]"},
		{"Commit actual amount's metric", func() error {
			_, err := l.Commit(ctx, ratelimit.Grant{}, map[string]float64{bad: -1})
			return err
		}, fmt.Sprintf("actual[%.60q]", bad)},
		{"Release lease id", func() error {
			_, err := l.Release(ctx, ratelimit.Grant{Leases: []ratelimit.Lease{{ID: bad}}}, "")
			return err
		}, "Leases.ID[0]"},
		{"RenewLeases lease id", func() error { _, err := l.RenewLeases(ctx, []ratelimit.Lease{{ID: bad}}); return err }, "Leases.ID[0]"},
		{"Attach attempt id", func() error { _, err := l.Attach(ctx, bad, ratelimit.Grant{}); return err }, "AttemptID"},
		{"GetTask task id", func() error { _, err := l.GetTask(ctx, bad); return err }, "taskID"},
		{"HeartbeatTask token", func() error { _, err := l.HeartbeatTask(ctx, running.ID, bad, 0); return err }, "token"},
		{"ClaimTask blank worker", func() error { _, err := l.ClaimTask(ctx, blank, 0); return err }, "workerID"},
		{"CreateTask async worker", func() error {
			_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Worker: bad})
			return err
		}, "Worker"},
		{"CreateTask queue metric", func() error {
			q := queueLimit("q", 1)
			q.Metric = bad
			_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{q}})
			return err
		}, "QueueLimits[0].Metric"},
		{"Reserve duplicate limit", func() error {
			lim := window(escapes, escapes, escapes, 1, 1)
			_, err := l.Reserve(ctx, "", "", []ratelimit.Limit{lim, lim})
			return err
		}, "Limits[1]"},
		{"CreateTask duplicate queue limit", func() error {
			q := queueLimit(escapes, 1)
			q.Scope.Type = escapes
			_, err := l.CreateTask(ctx, ratelimit.TaskSpec{Async: true, QueueLimits: []ratelimit.Limit{q, q}})
			return err
		}, "QueueLimits[1]"},
		{"FinishTask status", func() error {
			_, err := l.FinishTask(ctx, running.ID, running.ExecutionToken, ratelimit.Outcome{Status: bad})
			return err
		}, "Outcome.Status"},
		{"FinishTask success with an error code", func() error {
			_, err := l.FinishTask(ctx, running.ID, running.ExecutionToken, ratelimit.Outcome{Status: ratelimit.TaskSucceeded, ErrorCode: bad})
			return err
		}, "Outcome"},
	}
	for _, tc := range tests {
		err := tc.call()
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || !errors.Is(err, ratelimit.ErrInvalidInput) || invalid.Field != tc.field {
			t.Errorf("%s: err = %.200v, want a *ValidationError on %s", tc.name, err, tc.field)
			continue
		}
		msg := err.Error()
		if len(msg) > 400 || !utf8.ValidString(msg) || strings.ContainsAny(msg, "\n\x00") {
			t.Errorf("%s: a message of %d bytes, valid UTF-8 %v, beginning %.200q; want at most 400 bytes of valid UTF-8 on one line without NUL",
				tc.name, len(msg), utf8.ValidString(msg), msg)
		}
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("refused calls wrote rows (-before +after):\n%s", diff)
	}
}

// A succeeded outcome that carries an error is refused with a message that
// names what it carries and what a success may carry: it used to show the
// ErrorCode alone, "invalid Outcome (): ..." for an ErrorMessage or Error.
func TestSucceededOutcomeWithAnErrorNamesIt(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	ctx := context.Background()
	running := startSync(t, l, 0)
	before := rowCounts(t, pool)
	for name, tc := range map[string]struct {
		out  ratelimit.Outcome
		want string
	}{
		"error code":    {ratelimit.Outcome{ErrorCode: "boom"}, "ErrorCode"},
		"error message": {ratelimit.Outcome{ErrorMessage: "it broke"}, "ErrorMessage"},
		"error detail":  {ratelimit.Outcome{Error: []byte(`{"why":1}`)}, "Error"},
	} {
		tc.out.Status = ratelimit.TaskSucceeded
		_, err := l.FinishTask(ctx, running.ID, running.ExecutionToken, tc.out)
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != "Outcome" {
			t.Errorf("success with an %s: err = %v, want a *ValidationError on Outcome", name, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "("+tc.want+" set)") || !strings.Contains(msg, "must be empty") {
			t.Errorf("success with an %s: message %q, want it to name %s as set and say what must be empty", name, msg, tc.want)
		}
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("refused calls wrote rows (-before +after):\n%s", diff)
	}
}

// A *ValidationError about no field in particular (ValidateAmount's, for
// its caller to name) still reads as a sentence: "invalid value (NaN)",
// not "invalid  (NaN)".
func TestValidationErrorWithoutAFieldReadsWell(t *testing.T) {
	t.Parallel()
	err := ratelimit.ValidateAmount(-1)
	if got, want := err.Error(), "ratelimit: invalid value (-1): must not be negative"; got != want {
		t.Errorf("ValidateAmount(-1) = %q, want %q", got, want)
	}
}

// Blank text is refused as such: "   " is not empty, and the message said
// it must not be.
func TestBlankTextIsRefusedAsBlank(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"", " \t\n"} {
		err := window("api_key", key, "requests", 1, 1).Validate()
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || invalid.Field != "Scope.Key" || !strings.HasSuffix(err.Error(), ": must not be empty or white space only") {
			t.Errorf("Validate of the key %q: err = %v, want a *ValidationError on Scope.Key that must not be empty or white space only", key, err)
		}
	}
}
