package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/durationtext"
	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" { // a test runs pgadmit as a child process
		os.Args = append([]string{"pgadmit"}, os.Args[1:]...)
		main()
	}
	os.Exit(pgtest.Main(m))
}

// cli runs pgadmit in-process with args and an environment of its own (DATABASE_URL is never
// inherited from the test process), and returns its output and exit code.
func cli(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut, func(k string) string { return env[k] })
	return out.String(), errOut.String(), code
}

// cliOK runs pgadmit and fails the test unless it exits 0.
func cliOK(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, nil, args...)
	if code != exitOK {
		t.Fatalf("pgadmit %s: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// oneLine fails the test unless s is exactly one line of text.
func oneLine(t *testing.T, what, s string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("%s is not one line: %q", what, s)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	out := cliOK(t, "--help")
	for _, c := range commands() {
		if !strings.Contains(out, "  "+c.name+" ") {
			t.Errorf("pgadmit --help does not list %s:\n%s", c.name, out)
		}
	}
	for _, c := range commands() {
		for _, flag := range []string{"--help", "-h"} {
			out, errOut, code := cli(t, nil, c.name, flag)
			if code != exitOK || !strings.HasPrefix(out, "Usage: pgadmit "+c.name) || errOut != "" {
				t.Errorf("pgadmit %s %s: exit %d, stdout %q, stderr %q", c.name, flag, code, out, errOut)
			}
		}
	}
	// A flag whose usage says its default itself shows no second, raw one ("(default -1)").
	for _, c := range commands() {
		out := cliOK(t, c.name, "--help")
		for line := range strings.Lines(out) {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("pgadmit %s --help: two defaults in %q", c.name, line)
			}
		}
	}
	if out := cliOK(t, "help", "help"); !strings.Contains(out, "Usage:") {
		t.Errorf("pgadmit help help:\n%s", out)
	}
	for _, flag := range []string{"-h", "--help"} {
		if out := cliOK(t, "help", flag); !strings.Contains(out, "Usage:") {
			t.Errorf("pgadmit help %s:\n%s", flag, out)
		}
	}
	if out := cliOK(t, "help", "migrate"); !strings.Contains(out, "Usage: pgadmit migrate") {
		t.Errorf("pgadmit help migrate:\n%s", out)
	}
	// No command: usage on stderr, exit 2.
	out, errOut, code := cli(t, nil)
	if code != exitUsage || out != "" || !strings.Contains(errOut, "Usage:") {
		t.Errorf("pgadmit with no command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	db := map[string]string{"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none?sslmode=disable"}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string // in the message
	}{
		{nil, []string{"frobnicate"}, `unknown command "frobnicate"`},
		{nil, []string{"--nope", "migrate"}, "unknown flag --nope"},
		{nil, []string{"help", "migrate", "up"}, `unexpected argument "up" after help migrate`},
		{nil, []string{"help", "nosuch"}, `unknown command "nosuch"`},
		{db, []string{"migrate", "--nope", "up"}, "unknown flag --nope"},
		{db, []string{"migrate"}, "missing subcommand"},
		{db, []string{"migrate", "sideways"}, `unknown subcommand "sideways"`},
		{db, []string{"migrate", "--to", "1", "status"}, "--to applies to up and down"},
		{db, []string{"migrate", "up", "--to", "9999"}, "--to 9999: no such migration (versions 1 to "},
		{db, []string{"migrate", "down", "--to", "42"}, "--to 42: no such migration"},
		{db, []string{"migrate", "up", "--to", "-1"}, "--to must be a version >= 0, got -1"},
		{db, []string{"migrate", "down", "--to", "-1"}, "--to must be a version >= 0, got -1"},
		{db, []string{"migrate", "--to", "-1", "version"}, "--to applies to up and down"},
		{nil, []string{"migrate", "up"}, "no database: set DATABASE_URL or pass --database-url"},
		{nil, []string{"doctor"}, "no database"},
		{db, []string{"inspect", "--scope", "api_key"}, `bad --scope "api_key": want TYPE:KEY`},
		{db, []string{"inspect", "--scope", ":k1"}, "bad --scope"},
		{db, []string{"inspect", "--scope", "api_key:\xff"}, `bad --scope "api_key:\xff": its KEY must be valid UTF-8`},
		{db, []string{"inspect", "--scope", "api_key: "}, `bad --scope "api_key: ": its KEY must not be empty`},
		// A part that begins with a quote is Go-quoted, as inspect shows it, and must be one
		// quoted string.
		{db, []string{"inspect", "--scope", `"tier:gold`}, `bad --scope "\"tier:gold": want TYPE:KEY`},
		{db, []string{"inspect", "--scope", `"tier:gold"c`}, `bad --scope "\"tier:gold\"c": want TYPE:KEY`},
		{db, []string{"inspect", "--scope", `api_key:"team a`}, `bad --scope "api_key:\"team a": want TYPE:KEY`},
		{db, []string{"inspect", "--scope", `api_key:""`}, `bad --scope "api_key:\"\"": want TYPE:KEY`},
		{db, []string{"inspect", "--scope", `api_key:"\xff"`}, `its KEY must be valid UTF-8`},
		// An empty --scope (an unset shell variable) is not "every scope".
		{db, []string{"inspect", "--scope", ""}, `bad --scope "": want TYPE:KEY`},
		{db, []string{"inspect", "--scope="}, `bad --scope "": want TYPE:KEY`},
		{db, []string{"inspect", "--limit", "0"}, "--limit must be"},
		{db, []string{"inspect", "extra"}, `unexpected argument "extra"`},
		// A wait or a run under 100ms (minDuration) is a usage error, as an interval under it is:
		// no connection is made within 1ns, and a workload of 1ns ran no operation and passed.
		{db, []string{"--connect-timeout", "0s", "inspect"}, "--connect-timeout must be at least 100ms, got 0s"},
		{db, []string{"--connect-timeout", "1ns", "inspect"}, "--connect-timeout must be at least 100ms, got 1ns"},
		{db, []string{"doctor", "--connect-timeout", "99ms"}, "--connect-timeout must be at least 100ms, got 99ms"},
		{db, []string{"bench", "--duration", "1ns"}, "--duration must be between 100ms and 1h, got 1ns"},
		{db, []string{"bench", "--duration", "2h"}, "--duration must be between 100ms and 1h, got 2h"},
		{db, []string{"recover", "--every", "1s", "--pass-timeout", "1ns"}, "--pass-timeout must be at least 100ms, got 1ns"},
		{db, []string{"bench", "--workers", "0"}, "--workers must be between 1 and 256"},
		{db, []string{"bench", "--instances", "0"}, "--instances must be between 1 and --workers (16), got 0"},
		{db, []string{"bench", "--workers", "4", "--instances", "5"}, "--instances must be between 1 and --workers (4), got 5"},
		{db, []string{"bench", "--duration", "-1s"}, "--duration must be between 100ms and 1h, got -1s"},
		{db, []string{"bench", "--think", "-1ms"}, "--think must be between 0 and 1m, got -1ms"},
		{db, []string{"bench", "--think", "2m"}, "--think must be between 0 and 1m, got 2m (see"},
		{db, []string{"bench", "--only", "W1,W10"}, `unknown workload "W10"`},
		// Given empty (a script's unset variable), they are refused, not read as not given.
		{db, []string{"bench", "--only", ""}, "--only is empty"},
		{db, []string{"bench", "--json="}, "--json is empty"},
		{db, []string{"bench", "--cpuprofile", ""}, "--cpuprofile is empty"},
		{db, []string{"bench", "--workers", "many"}, `invalid value "many" for --workers: want a whole number (see`},
		// The flag package's errors name a flag -name, and said "parse error" of a value that is
		// not a number or not a boolean: they name it as --help and the README do, and say what
		// it wants.
		{db, []string{"migrate", "up", "--to", "latest"}, `invalid value "latest" for --to: want a whole number (see`},
		{db, []string{"demo", "--http=maybe"}, `invalid value "maybe" for --http: want true or false (see`},
		{db, []string{"inspect", "--limit"}, `--limit needs a value (see`},
		{nil, []string{"--database-url"}, `--database-url needs a value (see`},
		{db, []string{"recover", "--batch-size", "99999999999999999999"}, `invalid value "99999999999999999999" for --batch-size: value out of range (see`},
		{db, []string{"bench", "--combining=false", "--in-flight", "4"}, "--in-flight needs --combining"},
		{db, []string{"bench", "--rounds", "0"}, "--rounds must be between 1 and 1000, got 0"},
		{db, []string{"bench", "--rounds", "1001"}, "--rounds must be between 1 and 1000"},
		{db, []string{"bench", "--statements", "-1"}, "--statements must be between 0 and 100, got -1"},
		{db, []string{"bench", "--statements", "101"}, "--statements must be between 0 and 100"},
		// A progress line every microsecond would flood stderr and take a processor from the
		// workers it measures.
		{db, []string{"bench", "--progress", "1us"}, "--progress must be 0 (never) or at least 100ms, got 1µs"},
		{db, []string{"bench", "--progress", "99ms"}, "--progress must be 0 (never) or at least 100ms, got 99ms"},
		// A negative one says the same: it used to get an older message of its own (">= 0").
		{db, []string{"bench", "--progress", "-1s"}, "--progress must be 0 (never) or at least 100ms, got -1s"},
		{db, []string{"doctor", "--progress", "-1ms"}, "--progress must be 0 (never) or at least 100ms, got -1ms"},
		{db, []string{"bench", "--cpuprofile", "/nonexistent/dir/cpu.prof"}, "--cpuprofile: open /nonexistent/dir/cpu.prof: no such file or directory"},
		{db, []string{"bench", "--json", "/nonexistent/dir/bench.json"}, "--json: open /nonexistent/dir/bench.json: no such file or directory"},
		{db, []string{"demo", "--duration", "1s"}, "--duration must be between 5s and 10m"},
		// A refused duration is named as the operator wrote it (durationtext.Operator), not as
		// Go's Duration.String does (11m0s, -1h0m0s).
		{db, []string{"demo", "--duration", "11m"}, "--duration must be between 5s and 10m, got 11m (see"},
		{db, []string{"demo", "--http", "--decision-timeout", "2m"}, "--decision-timeout must be between 1ms and 1m, got 2m (see"},
		{db, []string{"prune", "--older-than", "-1h"}, "--older-than must be positive, got -1h (see"},
		{db, []string{"prune", "--task-retention", "-168h"}, "--task-retention must be >= 0, got -168h (see"},
		{db, []string{"prune", "--progress", "-1m"}, "--progress must be >= 0, got -1m (see"},
		{db, []string{"recover", "--progress", "-2h"}, "--progress must be >= 0, got -2h (see"},
		{db, []string{"demo", "--instances", "1"}, "--instances must be between 2 and 16"},
		{db, []string{"demo", "--decision-timeout", "2s"}, "--decision-timeout needs --http"},
		{db, []string{"demo", "--http", "--instances", "4"}, "--instances does not apply to --http"},
		{db, []string{"demo", "--http", "--decision-timeout", "0s"}, "--decision-timeout must be between 1ms and 1m, got 0s"},
		// The floor of every interval flag (minInterval), in the words of bench's --progress.
		{db, []string{"recover", "--every", "1ms"}, "--every must be 0 (a single pass) or at least 100ms, got 1ms"},
		{db, []string{"recover", "--every", "-1m"}, "--every must be 0 (a single pass) or at least 100ms, got -1m"},
		// A one-shot run takes --pass-timeout too (TestRecoverAndPruneOnAFrozenServerAreCutOffByPassTimeout),
		// with the same floor; 0 is not "no bound", which leaving it out means.
		{db, []string{"recover", "--pass-timeout", "0s"}, "--pass-timeout must be at least 100ms, got 0s"},
		{db, []string{"prune", "--pass-timeout", "99ms"}, "--pass-timeout must be at least 100ms, got 99ms"},
		{db, []string{"prune", "--pass-timeout", "-1m"}, "--pass-timeout must be at least 100ms, got -1m"},
		{db, []string{"doctor", "--pass-timeout", "0s"}, "--pass-timeout must be at least 100ms, got 0s"},
		{db, []string{"inspect", "--pass-timeout", "99ms"}, "--pass-timeout must be at least 100ms, got 99ms"},
		{db, []string{"prune", "--batch-size", "0"}, "--batch-size must be between"},
		{db, []string{"doctor", "now"}, `unexpected argument "now"`},
		{db, []string{"inspect", "--lock-timeout", "-1s"}, "--lock-timeout must be >= 0 (0: no bound), got -1s"},
		{db, []string{"doctor", "--lock-timeout", "-1ms"}, "--lock-timeout must be >= 0 (0: no bound), got -1ms"},
		{db, []string{"recover", "--lock-timeout", "-5s"}, "--lock-timeout must be >= 0 (0: no bound), got -5s"},
		{db, []string{"recover", "--every", "1s", "--lock-timeout", "-5s"}, "--lock-timeout must be >= 0 (0: no bound), got -5s"},
		{db, []string{"prune", "--lock-timeout", "-1m"}, "--lock-timeout must be >= 0 (0: no bound), got -1m"},
		// Past lock_timeout's range, which the server (and ratelimit) would cap it to, unsaid.
		{db, []string{"inspect", "--lock-timeout", "600h"}, "--lock-timeout must be at most 596h31m23.647s (PostgreSQL's lock_timeout: 2147483647 ms; 0: no bound), got 600h"},
		{db, []string{"doctor", "--lock-timeout", "596h31m23.648s"}, "--lock-timeout must be at most 596h31m23.647s"},
		{db, []string{"recover", "--lock-timeout", "1000h"}, "--lock-timeout must be at most 596h31m23.647s"},
		{db, []string{"prune", "--lock-timeout", "2562047h"}, "--lock-timeout must be at most 596h31m23.647s"},
		// migrate has a lock_timeout of its own for its migrations; demo and bench wait for no lock of another session.
		{db, []string{"migrate", "up", "--lock-timeout", "1s"}, "unknown flag --lock-timeout"},
	} {
		out, errOut, code := cli(t, tc.env, tc.args...)
		if code != exitUsage {
			t.Errorf("pgadmit %s: exit %d, want %d (stderr %q)", strings.Join(tc.args, " "), code, exitUsage, errOut)
			continue
		}
		if !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "--help") {
			t.Errorf("pgadmit %s: stderr %q, want it to contain %q and a --help hint", strings.Join(tc.args, " "), errOut, tc.want)
		}
		oneLine(t, "usage error of pgadmit "+strings.Join(tc.args, " "), errOut)
		if out != "" {
			t.Errorf("pgadmit %s: stdout %q, want nothing", strings.Join(tc.args, " "), out)
		}
	}
}

func TestUnreachableDatabaseHidesPassword(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	for _, dsn := range []string{
		// Nothing listens on port 1.
		"postgres://bob:" + secret + "@127.0.0.1:1/app?sslmode=disable",
		"host=127.0.0.1 port=1 user=bob password=" + secret + " dbname=app sslmode=disable",
		"host=127.0.0.1 port=1 user=bob password='" + secret + "' dbname=app sslmode=disable",
		// Malformed: pgx cannot parse them.
		"postgres://bob:" + secret + "@127.0.0.1:notaport/app",
		"postgres://bob:" + secret + "@[::1/app",
		"host=127.0.0.1 port=x user=bob password=" + secret,
		"postgres://bob@127.0.0.1:1/app?password=" + secret + "&sslmode=disable",
	} {
		for _, args := range [][]string{
			{"--database-url", dsn, "--connect-timeout", "2s", "migrate", "status"},
			{"inspect", "--database-url", dsn},
			{"doctor", "--database-url", dsn},
		} {
			out, errOut, code := cli(t, nil, args...)
			if code != exitFailure {
				t.Errorf("pgadmit %s: exit %d, want %d (stderr %q)", args[len(args)-1], code, exitFailure, errOut)
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("password printed for DSN %q: stdout %q, stderr %q", dsn, out, errOut)
			}
			oneLine(t, "error for DSN "+redactDSN(dsn), errOut)
		}
	}
	// With DATABASE_URL from the environment too.
	_, errOut, code := cli(t, map[string]string{"DATABASE_URL": "postgres://bob:" + secret + "@127.0.0.1:1/app?sslmode=disable"}, "inspect")
	if code != exitFailure || strings.Contains(errOut, secret) || !strings.Contains(errOut, "cannot connect to postgres://bob:xxxxx@127.0.0.1:1/app") {
		t.Errorf("inspect with DATABASE_URL: exit %d, stderr %q", code, errOut)
	}
}

// A connection URL pasted with its variable's name (DATABASE_URL=postgres://bob:secret@..., a
// line of an env file) is no URL: pgx reads it as a keyword/value string, a setting named
// DATABASE_URL whose value is the URL. The error that says where pgadmit could not connect quoted
// it whole, password included, as did every pass of a sweeper that logs it.
func TestDatabaseURLWithItsNameHidesPassword(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	for _, dsn := range []string{
		"DATABASE_URL=postgres://bob:" + secret + "@127.0.0.1:1/app?sslmode=disable",
		"DATABASE_URL='postgres://bob:" + secret + "@127.0.0.1:1/app'",
		"host=127.0.0.1 port=1 dbname=postgresql://bob:" + secret + "@db/app",
	} {
		for _, args := range [][]string{{"doctor"}, {"migrate", "status"}} {
			_, errOut, code := cli(t, map[string]string{"DATABASE_URL": dsn}, append([]string{"--connect-timeout", "2s"}, args...)...)
			if code != exitFailure || strings.Contains(errOut, secret) || !strings.Contains(errOut, "cannot connect to ") {
				t.Errorf("pgadmit %s with DATABASE_URL %q: exit %d, stderr %q; want exit 1, cannot connect, and no password",
					strings.Join(args, " "), redactDSN(dsn), code, errOut)
			}
		}
	}
}

// A database URL of another scheme (mysql://, a Postgres:// that pgx does not take) is a usage
// error that says which schemes pgadmit reads, with no password in it, for every command and
// whether it comes from --database-url or DATABASE_URL: pgx read it as a keyword/value string and
// said only "cannot parse `mysql:xxxxxx@h/d`". A keyword/value string still works.
func TestDatabaseURLOfAnotherScheme(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	for _, dsn := range []string{"mysql://u@h/d", "mysql://bob:" + secret + "@h/d", "Postgres://bob@127.0.0.1/app", "postgres+pgx://h/d"} {
		scheme, _, _ := strings.Cut(dsn, "://")
		want := "the database URL's scheme must be postgres:// or postgresql://, not " + scheme + `:// (a key=value string such as "host=... dbname=..." works too)`
		for _, args := range [][]string{{"doctor"}, {"inspect"}, {"migrate", "status"}, {"recover", "--every", "1s"}, {"prune"}, {"bench"}, {"demo"}} {
			for _, given := range []struct {
				env  map[string]string
				args []string
			}{
				{nil, append([]string{"--database-url", dsn}, args...)},
				{map[string]string{"DATABASE_URL": dsn}, args},
			} {
				out, errOut, code := cli(t, given.env, given.args...)
				if code != exitUsage || out != "" || !strings.Contains(errOut, want) || strings.Contains(errOut, secret) {
					t.Errorf("pgadmit %s with DATABASE_URL %q: exit %d, stdout %q, stderr %q; want exit %d and %q",
						strings.Join(given.args, " "), given.env["DATABASE_URL"], code, out, errOut, exitUsage, want)
				}
				oneLine(t, "usage error of pgadmit "+strings.Join(given.args, " "), errOut)
			}
		}
	}
	url := pgtest.NewURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.ConnConfig
	kv := fmt.Sprintf("host=%s port=%d user=%s password='%s' dbname=%s sslmode=disable", c.Host, c.Port, c.User, c.Password, c.Database)
	if out := cliOK(t, "--database-url", kv, "doctor"); out != "doctor: the books balance\n" {
		t.Errorf("doctor on a keyword/value connection string: %q", out)
	}
}

// A connection string given where pgadmit expects something else (as a positional argument, as
// a command, as the value of another flag) is never echoed with its password in the usage error.
func TestMisplacedDatabaseURLHidesPassword(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-pw"
	for _, dsn := range []string{
		"postgres://bob:" + secret + "@127.0.0.1:1/app",
		"postgres://bob@127.0.0.1:1/app?password=" + secret,
		"host=127.0.0.1 port=1 user=bob password=" + secret,
		`postgres://bob:"` + secret + `"@127.0.0.1:1/app`, // %q escapes its quotes
	} {
		for _, args := range [][]string{
			{"bench", dsn},
			{"demo", dsn},
			{dsn},
			{"--database-url=", dsn, "inspect"},
			{"help", "inspect", dsn},
			{"--connect-timeout", dsn, "inspect"},
			{"--connect-timeout=" + dsn, "inspect"},
			{"--database-url", dsn, "migrate", "status", dsn},
			{"migrate", "status", dsn},
		} {
			for _, env := range []map[string]string{nil, {"DATABASE_URL": "postgres://127.0.0.1:1/other"}} {
				out, errOut, code := cli(t, env, args...)
				if code != exitUsage {
					t.Errorf("pgadmit %q: exit %d, want %d (stderr %q)", args, code, exitUsage, errOut)
				}
				if strings.Contains(out+errOut, secret) {
					t.Errorf("pgadmit %q printed the password: stdout %q, stderr %q", args, out, errOut)
				}
			}
		}
	}
}

// A --json file is created before bench connects, so that a bad path fails at once; a run that
// fails before its report is written leaves no empty file behind.
func TestBenchJSONOfAFailedRun(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bench.json")
	_, errOut, code := cli(t, nil, "bench", "--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=disable", "--json", path)
	if code != exitFailure || !strings.Contains(errOut, "cannot connect") {
		t.Errorf("bench on an unreachable database: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("bench that failed left its --json file behind: %v", err)
	}
}

// A --json path that is a symlink to a report (not to the process's stdout, as /dev/stdout in
// `>> log` is: TestJSONToDevStdoutAppendsToTheShellsFile) is not removed by a run that fails
// before its report is written; the report it leads to, an earlier run's, is, as a regular file
// at the path is (TestDoctorJSONOfAFailedRun). It used to be left, as a stream's file is.
func TestBenchJSONOfAFailedRunThroughASymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target, path := filepath.Join(dir, "target.json"), filepath.Join(dir, "bench.json")
	if err := os.WriteFile(target, []byte(`{"run_id": "earlier"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, nil, "bench", "--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=disable", "--json", path)
	if code != exitFailure || !strings.Contains(errOut, "cannot connect") {
		t.Errorf("bench on an unreachable database: exit %d, stderr %q", code, errOut)
	}
	if st, err := os.Lstat(path); err != nil || st.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("bench that failed changed the --json symlink: %v (%v)", st, err)
	}
	if b, err := os.ReadFile(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("bench that failed left the earlier report behind the --json symlink: %q (%v)", b, err)
	}
}

// A --cpuprofile file that exists already (the profile of an earlier run) is neither emptied
// nor removed by a run that fails before profiling starts (unlike --json: a profile is no report of this run); it used to be
// truncated at start and then removed. (Not parallel: it profiles, which one test at a time may.)
func TestBenchCPUProfileOfAFailedRunKeepsAnExistingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.prof")
	const earlier = "an earlier profile"
	if err := os.WriteFile(path, []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := cli(t, nil, "bench", "--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=disable", "--cpuprofile", path)
	if code != exitFailure || !strings.Contains(errOut, "cannot connect") {
		t.Errorf("bench on an unreachable database: exit %d, stderr %q", code, errOut)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("bench that failed removed the existing --cpuprofile file: %v", err)
	}
	if string(b) != earlier {
		t.Errorf("bench that failed changed the existing --cpuprofile file to %q, want %q", b, earlier)
	}
	// A run that gets to profile replaces it, from its first byte.
	p, err := createBenchProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("a profile written over an earlier one: %v, want a gzipped profile, got %q", err, b)
	}
	// A new file is still not left behind by a failed run.
	fresh := filepath.Join(dir, "fresh.prof")
	cli(t, nil, "bench", "--database-url", "postgres://nobody@127.0.0.1:1/none?sslmode=disable", "--cpuprofile", fresh)
	if _, err := os.Stat(fresh); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("bench that failed left its new --cpuprofile file behind: %v", err)
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:pw@h:5432/d?sslmode=disable", "postgres://u:xxxxx@h:5432/d?sslmode=disable"},
		{"postgresql://u:p%40ss@h/d", "postgresql://u:xxxxx@h/d"},
		{"postgres://u:p@ss@h/d", "postgres://u:xxxxx@h/d"},
		{"postgres://u:my?secret@h/d", "postgres://u:xxxxx@h/d"},
		{"postgres://u:my#secret@h/d", "postgres://u:xxxxx@h/d"},
		{"postgres://u:p@ss/w@h/d", "postgres://u:xxxxx@h/d"},
		{"postgres://u:pw@h/d?options=a@b", "postgres://u:xxxxx@h/d?options=a@b"},
		{"postgres://u@h/d?password=ab#cd", "postgres://u@h/d?password=xxxxx"},
		{`host=h user=u password=hunter\ two dbname=d`, "host=h user=u password=xxxxx dbname=d"},
		{"postgres://u@h/d", "postgres://u@h/d"},
		{"postgres://u:pw@h1,h2/d", "postgres://u:xxxxx@h1,h2/d"},
		{"postgres://u@h/d?sslmode=disable&password=pw", "postgres://u@h/d?sslmode=disable&password=xxxxx"},
		{"postgres://u@h/d?sslpassword=pw", "postgres://u@h/d?sslpassword=xxxxx"},
		{"host=h user=u password=pw dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h password='p w' dbname=d", "host=h password=xxxxx dbname=d"},
		{"host=h password = pw", "host=h password = xxxxx"},
		{"DATABASE_URL=postgres://u:pw@h/d", "DATABASE_URL=postgres://u:xxxxx@h/d"},
		{"DATABASE_URL='postgresql://u:p@ss@h/d'", "DATABASE_URL='postgresql://u:xxxxx@h/d'"},
		{"", ""},
	} {
		if got := redactDSN(tc.in); got != tc.want {
			t.Errorf("redactDSN(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	msg := scrub("cannot parse `postgres://u:p%40ss@h/d`: bad (p@ss)\nmore", "postgres://u:p%40ss@h/d")
	if strings.Contains(msg, "p@ss") || strings.Contains(msg, "p%40ss") || strings.Contains(msg, "\n") {
		t.Errorf("scrub left the password or a newline: %q", msg)
	}
}

// The connect timeout given is the one that applies, not the flag's default. The timeouts
// given lie above the default, so that the default shows as a run shorter than the timeout: a
// lower bound, which no stall of a busy machine can fail (an upper bound between a short
// timeout and the default, as this used to have, can).
func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() }) // after the parallel subtests
	go func() {
		var held []net.Conn
		for {
			c, err := l.Accept()
			if err != nil { // l closed: the test is over
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	dsn := "postgres://bob:s3cr3t-pw@" + l.Addr().String() + "/app?sslmode=disable"
	timeout := defaultConnectTimeout + 2*time.Second
	seconds := int(timeout / time.Second)

	// silent runs doctor against the server and checks that it gave up after timeout (not
	// before, and not endlessly later: a connect that never gives up fails here, not at the
	// test binary's timeout), saying so in one line that names it as from.
	silent := func(t *testing.T, from string, args ...string) {
		start := time.Now()
		_, errOut, code := cli(t, nil, args...)
		took := time.Since(start)
		if code != exitFailure || !strings.Contains(errOut, "cannot connect to postgres://bob:xxxxx@") || strings.Contains(errOut, "s3cr3t") {
			t.Errorf("doctor on a silent server: exit %d, stderr %q", code, errOut)
		}
		if want := fmt.Sprintf("no answer within %s (%s)", timeout, from); !strings.Contains(errOut, want) {
			t.Errorf("doctor on a silent server: stderr %q does not say %q", errOut, want)
		}
		oneLine(t, "connect timeout error", errOut)
		if took < timeout || took > timeout+30*time.Second {
			t.Errorf("doctor on a silent server gave up after %s with a connect timeout of %s from %s (the default is %s)",
				took, timeout, from, defaultConnectTimeout)
		}
	}
	t.Run("flag", func(t *testing.T) {
		t.Parallel()
		silent(t, "--connect-timeout", "--database-url", dsn, "--connect-timeout", timeout.String(), "doctor")
	})
	// A connect_timeout in the URL is kept when --connect-timeout is not given (it was
	// overridden by the flag's default, 5s, while the message quoted the URL's value).
	t.Run("URL", func(t *testing.T) {
		t.Parallel()
		silent(t, "connect_timeout in the database URL", "--database-url", fmt.Sprintf("%s&connect_timeout=%d", dsn, seconds), "doctor")
	})
	// --connect-timeout, when given, wins over the URL's.
	t.Run("flag over URL", func(t *testing.T) {
		t.Parallel()
		_, errOut, _ := cli(t, nil, "--database-url", dsn+"&connect_timeout=10", "doctor", "--connect-timeout", "300ms")
		if !strings.Contains(errOut, "no answer within 300ms (--connect-timeout)") {
			t.Errorf("doctor with --connect-timeout 300ms and connect_timeout=10 in the URL: stderr %q", errOut)
		}
	})
}

// pgxpool pings a connection idle for a second before it hands it out; the ping is bounded by the
// connect timeout, or by the URL's pool_ping_timeout. Without a bound, a ping to a server that
// froze outlived the Acquire that Ctrl-C cancelled by up to a minute, holding its connection, and
// the pool's Close, every command's last step, waited for it: migrate stopped a minute after
// Ctrl-C (TestMigrateSaysItsDatabaseFrozeWhileItWaits, at times).
func TestPoolPingTimeoutIsTheConnectTimeout(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url   string
		given time.Duration // --connect-timeout; 0: not given
		want  time.Duration
	}{
		{"postgres://u@h/d", 0, defaultConnectTimeout},
		{"postgres://u@h/d?connect_timeout=9", 0, 9 * time.Second},
		{"postgres://u@h/d?connect_timeout=9", 300 * time.Millisecond, 300 * time.Millisecond},
		{"postgres://u@h/d?pool_ping_timeout=2s", 0, 2 * time.Second},
	} {
		a := newApp(io.Discard, io.Discard, func(string) string { return "" })
		if c.given > 0 {
			a.connectTimeout, a.connectTimeoutGiven = c.given, true
		}
		cfg, err := a.poolConfig(c.url, 2)
		if err != nil || cfg.PingTimeout != c.want {
			t.Errorf("pool of %s (--connect-timeout %s): ping timeout %v (%v), want %s", c.url, c.given, cfg.PingTimeout, err, c.want)
		}
	}
}

// newDatabase returns the URL of a fresh migrated database and a pool on it,
// closed when the test ends.
func newDatabase(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url := pgtest.NewURL(t)
	pool := pgtest.OpenPool(t, url)
	return url, pool
}

// readBackWindow returns the length of a window, a minute or a few minutes more
// (pgtest.WindowWithRoom), whose current window has 20 s left at least, for a test that
// reserves in it and then reads it back as the current window (inspect shows current windows
// only) or needs its calls to meet on one counter row. pgtest.AwaitRoomInWindow on a minute
// alone slept up to 20 s, a third of the time; this waits only when none of the lengths has
// room. The test prints the length it got with windowText.
func readBackWindow(t *testing.T, pool *pgxpool.Pool) time.Duration {
	t.Helper()
	return pgtest.WindowWithRoom(t, pool, time.Minute, 20*time.Second)
}

// windowText is a window's length as inspect and doctor print it (1m, 8m), quoted for a
// regular expression.
func windowText(w time.Duration) string {
	return regexp.QuoteMeta(durationtext.Operator(w))
}

// leftText matches what is left of a current window as inspect prints it (RESET IN, ENDS IN)
// for a window of a quarter of an hour at most: 8m, 7m59s, 42s.
const leftText = `(\d+m(\d+s)?|\d+s)`

// throughFreezer returns a freezer in front of pool's server and dbURL
// pointed at it, with the given query parameters set (connect_timeout, say).
func throughFreezer(t *testing.T, dbURL string, pool *pgxpool.Pool, params map[string]string) (*freezer.Freezer, string) {
	t.Helper()
	cfg := pool.Config().ConnConfig
	f := freezer.New(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = f.Addr()
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return f, u.String()
}
