package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

const jsonFileDoc = "{\n  \"ok\": true\n}\n"

// --json naming the process's own stdout, through a symlink as /dev/stdout is one to the
// shell's `>> log`, or as the file itself (`doctor --json log >> log`), adds the document at
// the end of what the file holds, and a run that fails leaves it: it used to empty the file
// (and /dev/stdout opened without O_APPEND would have written over the log from its first
// byte), and naming the file replaced it, the shell writing on to the file it had opened.
func TestJSONFileToStdoutAppends(t *testing.T) {
	t.Parallel()
	for _, symlink := range []bool{true, false} {
		dir := t.TempDir()
		log, path := filepath.Join(dir, "log"), filepath.Join(dir, "stdout")
		const text = "doctor: the books balance\n"
		if err := os.WriteFile(log, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer stdout.Close()
		if symlink {
			if err := os.Symlink(log, path); err != nil {
				t.Fatal(err)
			}
		} else {
			path = log
		}
		failed, err := openJSONFile(path, stdout)
		if err != nil {
			t.Fatal(err)
		}
		failed.abandon()
		j, err := openJSONFile(path, stdout)
		if err != nil {
			t.Fatal(err)
		}
		defer j.abandon()
		if err := j.write(nil, map[string]bool{"ok": true}); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(log); err != nil || string(b) != text+jsonFileDoc {
			t.Errorf("--json %s stdout's log: the log holds %q (%v), want %q", map[bool]string{true: "through a symlink to", false: "naming"}[symlink], b, err, text+jsonFileDoc)
		}
		if st, err := os.Lstat(path); err != nil || symlink != (st.Mode()&fs.ModeSymlink != 0) {
			t.Errorf("--json to stdout (symlink %v): %s is now %v (%v)", symlink, path, st, err)
		}
		if st, err := os.Stat(path); err != nil || !sameAsOneOf(st, []*os.File{stdout}) {
			t.Errorf("--json to stdout (symlink %v): %s is no longer the file stdout writes to (%v)", symlink, path, err)
		}
	}
}

// --json through a user's own symlink to a report (report.json -> reports/today.json) replaces
// the report it leads to, as naming that file would, and keeps the symlink; a run that fails
// removes that report and keeps the symlink, and the next run creates the report again through
// it. It used to get a second document added at its end, as if it were stdout.
func TestJSONFileThroughASymlinkReplacesItsTarget(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	reports := filepath.Join(dir, "reports")
	if err := os.Mkdir(reports, 0o755); err != nil {
		t.Fatal(err)
	}
	target, path := filepath.Join(reports, "today.json"), filepath.Join(dir, "report.json")
	if err := os.WriteFile(target, []byte(`{"ok": false}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("reports", "today.json"), path); err != nil {
		t.Fatal(err)
	}
	// The test's own stdout and stderr, as the command's, are not the report.
	j, err := openJSONFile(path, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer j.abandon()
	if err := j.write(nil, map[string]bool{"ok": true}); err != nil {
		t.Fatal(err)
	}
	wantSymlinkedReport(t, path, target, jsonFileDoc)
	wantOnly(t, reports, "today.json")

	failed, err := openJSONFile(path, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	failed.abandon()
	if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed run through a symlink left the earlier report it leads to: %v", err)
	}
	wantOnly(t, reports)
	j, err = openJSONFile(path, os.Stdout, os.Stderr)
	if err != nil {
		t.Fatalf("--json through a symlink whose report a failed run removed: %v", err)
	}
	defer j.abandon()
	if err := j.write(nil, map[string]bool{"ok": true}); err != nil {
		t.Fatal(err)
	}
	wantSymlinkedReport(t, path, target, jsonFileDoc)
}

// wantSymlinkedReport fails the test unless path is still a symlink and target holds doc.
func wantSymlinkedReport(t *testing.T, path, target, doc string) {
	t.Helper()
	if st, err := os.Lstat(path); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("--json through a symlink: the symlink is now %v (%v)", st, err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != doc {
		t.Errorf("--json through a symlink to a report: the report holds %q (%v), want %q", b, err, doc)
	}
}

// --json naming a regular file replaces it whole once the document is written, by a rename: a
// reader that opened the earlier report still reads it all, never an emptied or half-written
// one, and no temporary file is left beside it.
func TestJSONFileReplacesARegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "doctor.json")
	const earlier = `{"ok": false, "problems": ["an earlier run's"]}` + "\n"
	if err := os.WriteFile(path, []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := createJSONFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.abandon()
	reader, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if err := j.write(nil, map[string]bool{"ok": true}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != jsonFileDoc {
		t.Errorf("--json over an earlier report: the file holds %q (%v), want %q", b, err, jsonFileDoc)
	}
	b := make([]byte, len(earlier)+1)
	if n, _ := reader.Read(b); string(b[:n]) != earlier {
		t.Errorf("a reader of the earlier report read %q, want it whole: %q", b[:n], earlier)
	}
	wantOnly(t, dir, "doctor.json")
}

// A write that fails (a full disk; here the file closed under it) returns its error and leaves
// no file: neither a partial document nor an earlier run's report, which a script would read as
// this run's (as a run that fails before writing: TestDoctorJSONOfAFailedRun).
func TestJSONFileFailedWriteLeavesNoFile(t *testing.T) {
	t.Parallel()
	for _, earlier := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "doctor.json")
		if earlier {
			if err := os.WriteFile(path, []byte(`{"ok": true}`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		j, err := createJSONFile(path)
		if err != nil {
			t.Fatal(err)
		}
		j.file.Close()
		if err := j.write(nil, map[string]bool{"ok": true}); !errors.Is(err, os.ErrClosed) {
			t.Errorf("a failed --json write (an earlier report: %v): %v, want os.ErrClosed", earlier, err)
		}
		j.abandon()
		wantOnly(t, dir)
	}
}

// wantOnly fails the test unless dir holds just the files named.
func wantOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if len(got) != len(names) || (len(got) > 0 && got[0] != names[0]) {
		t.Errorf("%s holds %q, want %q", dir, got, names)
	}
}

// Two runs on one --json path: one that fails after the other wrote its report leaves that
// report, and removes only the earlier one it found at the start, if still there. It removed
// whatever regular file the path held, the other run's fresh report too.
func TestJSONFileFailedRunLeavesAnotherRunsReport(t *testing.T) {
	t.Parallel()
	for _, earlier := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "doctor.json")
		if earlier {
			if err := os.WriteFile(path, []byte(`{"ok": false}`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		failed, err := createJSONFile(path)
		if err != nil {
			t.Fatal(err)
		}
		other, err := createJSONFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := other.write(nil, map[string]bool{"ok": true}); err != nil {
			t.Fatal(err)
		}
		failed.abandon()
		if b, err := os.ReadFile(path); err != nil || string(b) != jsonFileDoc {
			t.Errorf("a run that failed after another wrote its report (an earlier one: %v): the file holds %q (%v), want the other's %q", earlier, b, err, jsonFileDoc)
		}
		wantOnly(t, dir, "doctor.json")
	}
}
