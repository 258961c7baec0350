package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `pgadmit doctor --json /dev/stdout >> log`, run as a process whose stdout is the log: a run
// that fails (bench on a closed port) leaves the log, and one that succeeds adds its text and
// its document at the end of it. /dev/stdout is a symlink that leads to the log, a regular file:
// --json tells it from a user's symlink to a report, which it replaces, by the process's stdout.
func TestJSONToDevStdoutAppendsToTheShellsFile(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/stdout"); err != nil {
		t.Skip(err)
	}
	url, _ := newDatabase(t)
	log := filepath.Join(t.TempDir(), "log")
	const earlier = "an earlier run's line\n"
	if err := os.WriteFile(log, []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	pgadmit := func(args ...string) (code int, stderr string) {
		t.Helper()
		out, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		child := exec.Command(os.Args[0], args...)
		child.Env = []string{runMainEnv + "=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "PG") {
				child.Env = append(child.Env, kv)
			}
		}
		var errOut bytes.Buffer
		child.Stdout, child.Stderr = out, &errOut
		_ = child.Run()
		return child.ProcessState.ExitCode(), errOut.String()
	}

	code, stderr := pgadmit("--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=disable", "bench", "--json", "/dev/stdout")
	if code != exitFailure || !strings.Contains(stderr, "cannot connect") {
		t.Errorf("bench --json /dev/stdout on a closed port: exit %d, stderr %q", code, stderr)
	}
	if b, err := os.ReadFile(log); err != nil || string(b) != earlier {
		t.Fatalf("bench --json /dev/stdout >> log that failed: the log holds %q (%v), want %q", b, err, earlier)
	}
	code, stderr = pgadmit("--database-url", url, "doctor", "--json", "/dev/stdout")
	if code != exitOK {
		t.Fatalf("doctor --json /dev/stdout: exit %d, stderr %q", code, stderr)
	}
	b, err := os.ReadFile(log)
	if s := string(b); err != nil || !strings.HasPrefix(s, earlier) || !strings.Contains(s, "\n{\n  \"ok\": true,") || !strings.HasSuffix(s, "\n}\n") {
		t.Errorf("doctor --json /dev/stdout >> log: the log holds %q (%v), want the earlier line, doctor's text, then its document", b, err)
	}
}
