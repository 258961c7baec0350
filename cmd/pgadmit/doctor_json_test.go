package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// doctorJSONDoc is doctor --json's document as a script reads it: amounts as json.Number, so
// that their every digit is compared.
type doctorJSONDoc struct {
	OK              bool       `json:"ok"`
	BooksChecked    bool       `json:"books_checked"`
	SchemaVersion   *int64     `json:"schema_version"`
	CheckedAt       *time.Time `json:"checked_at"`
	DurationSeconds float64    `json:"duration_s"`
	Problems        []struct {
		Kind          string      `json:"kind"`
		Recoverable   bool        `json:"recoverable"`
		ScopeType     string      `json:"scope_type"`
		ScopeKey      string      `json:"scope_key"`
		Metric        string      `json:"metric"`
		WindowSeconds float64     `json:"window_s"`
		WindowStart   *time.Time  `json:"window_start"`
		TaskID        string      `json:"task_id"`
		TaskStatus    string      `json:"task_status"`
		RowID         string      `json:"row_id"`
		AttemptID     string      `json:"attempt_id"`
		Expected      json.Number `json:"expected"`
		Actual        json.Number `json:"actual"`
	} `json:"problems"`
	Truncated   bool `json:"truncated"`
	Recoverable int  `json:"recoverable"`
	Pooler      *struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	} `json:"pooler"`
}

// decodeDoctorJSON decodes doctor's --json document, failing the test unless it is one.
func decodeDoctorJSON(t *testing.T, text string) doctorJSONDoc {
	t.Helper()
	var doc doctorJSONDoc
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("doctor --json: not one document: %v\n%s", err, text)
	}
	if dec.More() {
		t.Fatalf("doctor --json: more than one document:\n%s", text)
	}
	return doc
}

// latestSchemaVersion is the last migration this pgadmit embeds, which newDatabase applies.
func latestSchemaVersion(t *testing.T) int64 {
	t.Helper()
	versions, err := migrationVersions()
	if err != nil || len(versions) == 0 {
		t.Fatalf("migrationVersions = %v, %v", versions, err)
	}
	return versions[len(versions)-1]
}

// doctor --json - writes one document on stdout, its text on stderr; with a file, the text stays
// on stdout byte for byte as without --json. A clean database, then one whose counter holds 2
// more than its open reservation: the document names the counter, its window and the two
// amounts, as the library's report does, and the exit codes are doctor's.
func TestDoctorJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	version := latestSchemaVersion(t)

	before := time.Now()
	out, errOut, code := cli(t, nil, "--database-url", url, "doctor", "--json", "-")
	if code != exitOK {
		t.Fatalf("doctor --json - on a clean database: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	doc := decodeDoctorJSON(t, out)
	if !doc.OK || !doc.BooksChecked || len(doc.Problems) != 0 || doc.Problems == nil || doc.Truncated || doc.Recoverable != 0 || doc.Pooler != nil {
		t.Errorf("doctor --json on a clean database: %+v\n%s", doc, out)
	}
	if doc.SchemaVersion == nil || *doc.SchemaVersion != version {
		t.Errorf("doctor --json: schema_version %v, want %d\n%s", doc.SchemaVersion, version, out)
	}
	if doc.CheckedAt == nil || doc.CheckedAt.Before(before.Add(-time.Minute)) || doc.CheckedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("doctor --json: checked_at %v, want about now\n%s", doc.CheckedAt, out)
	}
	if doc.DurationSeconds <= 0 || doc.DurationSeconds > time.Since(before).Seconds() {
		t.Errorf("doctor --json: duration_s %g, want in (0, %g]", doc.DurationSeconds, time.Since(before).Seconds())
	}
	if errOut != "doctor: the books balance\n" {
		t.Errorf("doctor --json -: stderr %q, want the text", errOut)
	}

	win := readBackWindow(t, pool)
	lim := ratelimit.New(pool)
	if _, err := lim.Reserve(ctx, "", "", []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: "broken"}, Metric: ratelimit.MetricTokens,
		Limit: 1000, Amount: 5, Window: win}}); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	n, err := dbtest.New().OpsCounterCorruptAdd(ctx, pool, dbtest.OpsCounterCorruptAddParams{
		ScopeType: "api_key", ScopeKey: "broken", Metric: ratelimit.MetricTokens, ReservedDelta: 2,
	})
	if err != nil || n != 1 {
		t.Fatalf("OpsCounterCorruptAdd = %d, %v", n, err)
	}
	rep, err := ratelimit.NewMaintenance(pool).Doctor(ctx)
	if err != nil || len(rep.Problems) != 1 {
		t.Fatalf("Doctor = %+v, %v; want one problem", rep, err)
	}
	want := rep.Problems[0]

	textOut, textErr, textCode := cli(t, nil, "--database-url", url, "doctor")
	path := filepath.Join(t.TempDir(), "doctor.json")
	out, errOut, code = cli(t, nil, "--database-url", url, "doctor", "--json", path)
	if code != exitFailure || textCode != exitFailure {
		t.Fatalf("doctor on broken books: exit %d, with --json %d; want %d\nstderr:\n%s", textCode, code, exitFailure, errOut)
	}
	if out != textOut || errOut != textErr {
		t.Errorf("doctor --json FILE changed the text:\nstdout %q\nwant   %q\nstderr %q\nwant   %q", out, textOut, errOut, textErr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc = decodeDoctorJSON(t, string(b))
	if doc.OK || !doc.BooksChecked || len(doc.Problems) != 1 || doc.Truncated || doc.Recoverable != 0 {
		t.Fatalf("doctor --json on broken books: %+v\n%s", doc, b)
	}
	p := doc.Problems[0]
	if p.Kind != string(ratelimit.ProblemCounterReserved) || p.Recoverable || p.ScopeType != "api_key" || p.ScopeKey != "broken" ||
		p.Metric != ratelimit.MetricTokens || p.WindowSeconds != win.Seconds() || p.Expected != "5" || p.Actual != "7" {
		t.Errorf("doctor --json: problem %+v, want counter_reserved_mismatch of api_key:broken tokens, window_s %g, expected 5, actual 7\n%s",
			p, win.Seconds(), b)
	}
	if p.WindowStart == nil || !p.WindowStart.Equal(want.WindowStart) || p.TaskID != want.TaskID || p.RowID != want.RowID || p.AttemptID != want.AttemptID {
		t.Errorf("doctor --json: problem %+v, want the report's %+v\n%s", p, want, b)
	}
}

// A doctor or inspect that cannot reach its database writes no document: nothing on stdout with --json -,
// no file with --json FILE, and its error on stderr, exit 1. A FILE an earlier run wrote is
// removed too: a script that reads it after the failure would take the earlier results for this
// run's. bench, which fails there too, does the same.
func TestDoctorJSONOfAFailedRun(t *testing.T) {
	t.Parallel()
	const closed = "postgres://nobody@127.0.0.1:1/none?sslmode=disable"
	for _, cmd := range []string{"doctor", "inspect"} {
		out, errOut, code := cli(t, nil, "--database-url", closed, cmd, "--json", "-")
		if code != exitFailure || out != "" || !strings.Contains(errOut, "cannot connect") {
			t.Errorf("%s --json - on a closed port: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout", cmd, code, out, errOut)
		}
	}
	for _, cmd := range []string{"doctor", "inspect", "bench"} {
		for _, earlier := range []bool{false, true} {
			path := filepath.Join(t.TempDir(), cmd+".json")
			if earlier {
				if err := os.WriteFile(path, []byte(`{"ok": true}`+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, errOut, code := cli(t, nil, "--database-url", closed, cmd, "--json", path)
			if code != exitFailure || !strings.Contains(errOut, "cannot connect") {
				t.Errorf("%s --json FILE on a closed port: exit %d, stderr %q", cmd, code, errOut)
			}
			if b, err := os.ReadFile(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s that failed left its --json file (an earlier run's: %v) behind: %q, %v", cmd, earlier, b, err)
			}
		}
	}
}

// Behind PgBouncer, doctor --json says what the connection's check found: in transaction mode with
// pgx's default exec mode, a pooler_mismatch whose message is the advice doctor prints, the books
// not checked (exit 1); in session mode, pooler_unknown, and the books checked (exit 0).
func TestDoctorJSONBehindPgBouncer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode, kind, advice string
		code               int
	}{
		{"transaction", "pooler_mismatch", "default_query_exec_mode=exec", exitFailure},
		{"session", "pooler_unknown", "could not tell", exitOK},
	} {
		pooled, _ := pgtest.NewPoolerURLIn(t, c.mode, pgtest.PoolerSize)
		out, errOut, code := cli(t, nil, "--database-url", pooled, "doctor", "--json", "-")
		if code != c.code {
			t.Fatalf("doctor --json behind PgBouncer in %s mode: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", c.mode, code, c.code, out, errOut)
		}
		doc := decodeDoctorJSON(t, out)
		if doc.Pooler == nil || doc.Pooler.Kind != c.kind || !strings.Contains(doc.Pooler.Message, c.advice) ||
			!strings.Contains(errOut, "doctor: connection: "+doc.Pooler.Message+"\n") {
			t.Errorf("doctor --json behind PgBouncer in %s mode: pooler %+v, want %s saying %q as the text does\n%s\nstderr:\n%s", c.mode, doc.Pooler, c.kind, c.advice, out, errOut)
		}
		if ok := c.code == exitOK; doc.OK != ok || doc.BooksChecked != ok || (doc.CheckedAt != nil) != ok || doc.Problems == nil {
			t.Errorf("doctor --json behind PgBouncer in %s mode: ok %v, books_checked %v, checked_at %v, problems %v; want the books checked: %v",
				c.mode, doc.OK, doc.BooksChecked, doc.CheckedAt, doc.Problems, ok)
		}
	}
}

// doctor and inspect cut off by --pass-timeout on a server that stopped answering write no
// document: nothing on stdout with --json -, and a --json FILE they created is removed, their
// error on stderr, exit 1 (as a run that cannot connect: TestDoctorJSONOfAFailedRun).
func TestDoctorAndInspectJSONCutOffWriteNoDocument(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"doctor", "inspect"} {
		for _, toFile := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, to a file: %v", cmd, toFile), func(t *testing.T) {
				t.Parallel()
				path := "-"
				if toFile {
					path = filepath.Join(t.TempDir(), cmd+".json")
				}
				r := runUntilFrozen(t, context.Background(), dbtest.New().OpsLockCounters, cmd, "--lock-timeout", "0", "--pass-timeout", "2s",
					"--json", path)
				select {
				case code := <-r.exited:
					if code != exitFailure || r.stdout.String() != "" || !strings.Contains(r.stderr.String(), "cut off by --pass-timeout (2s)") {
						t.Errorf("%s --json %s cut off on a frozen server: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout",
							cmd, path, code, r.stdout.String(), r.stderr.String())
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("%s --pass-timeout 2s on a frozen server did not return within 30s; stderr %q", cmd, r.stderr.String())
				}
				if _, err := os.Stat(path); toFile && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s cut off left its --json file behind: %v", cmd, err)
				}
			})
		}
	}
}

// --json given empty (a script's unset variable) is a usage error, not a run without the document.
func TestDoctorAndInspectRefuseAnEmptyJSON(t *testing.T) {
	t.Parallel()
	noDB := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?sslmode=disable"}
	for _, cmd := range []string{"doctor", "inspect"} {
		if out, errOut, code := cli(t, noDB, cmd, "--json", " "); code != exitUsage || out != "" || !strings.HasPrefix(errOut, "pgadmit "+cmd+": --json is empty") {
			t.Errorf("%s --json ' ': exit %d, stdout %q, stderr %q; want a usage error", cmd, code, out, errOut)
		}
	}
}

// Behind a PgBouncer in statement mode, doctor --json says statement_pooling, with the advice
// doctor prints as its message, and that the books were not checked (ok false, checked_at null,
// no problems), exit 1 as without --json (TestDoctorBehindPgBouncerInStatementMode).
func TestDoctorJSONBehindPgBouncerInStatementMode(t *testing.T) {
	t.Parallel()
	pooled, _ := pgtest.NewPoolerURLIn(t, "statement", pgtest.PoolerSize)
	out, errOut, code := cli(t, nil, "--database-url", pooled+"&default_query_exec_mode=exec", "doctor", "--json", "-")
	if code != exitFailure {
		t.Fatalf("doctor --json behind PgBouncer in statement mode: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailure, out, errOut)
	}
	doc := decodeDoctorJSON(t, out)
	if doc.Pooler == nil || doc.Pooler.Kind != "statement_pooling" || !strings.Contains(doc.Pooler.Message, "pool_mode = transaction") ||
		!strings.Contains(errOut, "doctor: connection: "+doc.Pooler.Message+"\n") {
		t.Errorf("doctor --json behind PgBouncer in statement mode: pooler %+v, want statement_pooling advising pool_mode = transaction, as the text does\n%s\nstderr:\n%s",
			doc.Pooler, out, errOut)
	}
	if doc.OK || doc.BooksChecked || doc.CheckedAt != nil || doc.Problems == nil || len(doc.Problems) != 0 || doc.Truncated || doc.Recoverable != 0 {
		t.Errorf("doctor --json behind PgBouncer in statement mode: %+v; want the books not checked\n%s", doc, out)
	}
	if !strings.Contains(errOut, "pgadmit doctor: the connection pooler's mode does not suit pgadmit\n") {
		t.Errorf("doctor --json behind PgBouncer in statement mode: stderr %q, want its error", errOut)
	}
}

// The problems of tasks and attempts fill task_id, task_status, row_id and attempt_id: a gateway
// request whose task is marked succeeded behind the library's back (its reservation, lease and
// running attempt held by a finished task), and a worker's late reservation and lease, made in a
// transaction that commits after Recover failed its attempt, whose lease had expired, and requeued
// its task (held by a finished attempt of a queued task). Each field is what the test set up.
func TestDoctorJSONNamesTasksRowsAndAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool := newDatabase(t)
	lim := ratelimit.New(pool)

	if _, err := lim.CreateTask(ctx, ratelimit.TaskSpec{Async: true, Kind: "test"}); err != nil {
		t.Fatalf("create task: %v", err)
	}
	worker, err := lim.ClaimTask(ctx, "doomed-worker", time.Second)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	for { // until the database's clock is past the claim's lease
		now, err := dbtest.New().OpsNow(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		if now.After(worker.LeaseExpiresAt) {
			break
		}
		time.Sleep(worker.LeaseExpiresAt.Sub(now) + 10*time.Millisecond)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	late, err := lim.WithTx(tx).Reserve(ctx, worker.ID, worker.AttemptID, []ratelimit.Limit{
		{Scope: ratelimit.Scope{Type: "api_key", Key: "k2"}, Metric: ratelimit.MetricTokens, Limit: 1000, Amount: 7, Window: readBackWindow(t, pool)},
		{Scope: ratelimit.Scope{Type: "model", Key: "m2"}, Metric: ratelimit.MetricConcurrent, Limit: 2, Amount: 1},
	})
	if err != nil {
		t.Fatalf("reserve (late): %v", err)
	}
	if res, err := ratelimit.NewMaintenance(pool).Recover(ctx); err != nil || res.FailedAttempts != 1 || res.RequeuedAsyncTasks != 1 {
		t.Fatalf("Recover = %+v, %v; want the expired attempt failed and its task requeued", res, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// Then, Recover done, the gateway request's task finished behind its back.
	finished, g := gatewayRequest(t, pool, time.Minute, 0)
	var id pgtype.UUID
	if err := id.Scan(finished.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := dbtest.New().OpsTaskCorruptStatus(ctx, pool, dbtest.OpsTaskCorruptStatusParams{Status: ratelimit.TaskSucceeded, TaskID: id}); err != nil || n != 1 {
		t.Fatalf("OpsTaskCorruptStatus = %d, %v", n, err)
	}

	type problem struct{ taskID, taskStatus, rowID, attemptID, expected, actual string }
	want := map[ratelimit.ProblemKind]problem{
		ratelimit.ProblemReservationOfFinishedTask:    {finished.ID, ratelimit.TaskSucceeded, g.Reservations[0].ID, "", "0", "1"},
		ratelimit.ProblemLeaseOfFinishedTask:          {finished.ID, ratelimit.TaskSucceeded, g.Leases[0].ID, "", "0", "1"},
		ratelimit.ProblemAttemptOfFinishedTask:        {finished.ID, ratelimit.TaskSucceeded, finished.AttemptID, "", "0", "1"},
		ratelimit.ProblemReservationOfFinishedAttempt: {worker.ID, ratelimit.TaskQueued, late.Reservations[0].ID, worker.AttemptID, "0", "7"},
		ratelimit.ProblemLeaseOfFinishedAttempt:       {worker.ID, ratelimit.TaskQueued, late.Leases[0].ID, worker.AttemptID, "0", "1"},
	}
	out, errOut, code := cli(t, nil, "--database-url", url, "doctor", "--json", "-")
	if code != exitFailure {
		t.Fatalf("doctor --json on broken books: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitFailure, out, errOut)
	}
	doc := decodeDoctorJSON(t, out)
	if doc.OK || !doc.BooksChecked || len(doc.Problems) != len(want) || doc.Recoverable != len(want) || doc.Truncated {
		t.Fatalf("doctor --json: ok %v, books_checked %v, %d problems (%d recoverable), truncated %v; want %d problems, all recoverable\n%s",
			doc.OK, doc.BooksChecked, len(doc.Problems), doc.Recoverable, doc.Truncated, len(want), out)
	}
	for _, p := range doc.Problems {
		w, ok := want[ratelimit.ProblemKind(p.Kind)]
		if !ok {
			t.Errorf("doctor --json: a problem of kind %q, want none", p.Kind)
			continue
		}
		delete(want, ratelimit.ProblemKind(p.Kind))
		got := problem{p.TaskID, p.TaskStatus, p.RowID, p.AttemptID, p.Expected.String(), p.Actual.String()}
		if got != w || !p.Recoverable {
			t.Errorf("doctor --json: %s: task_id, task_status, row_id, attempt_id, expected, actual %q, recoverable %v; want %q, recoverable\n%s",
				p.Kind, got, p.Recoverable, w, out)
		}
	}
	for kind := range want {
		t.Errorf("doctor --json: no %s problem\n%s", kind, out)
	}
}
