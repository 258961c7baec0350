package schema_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
	"github.com/pgadmit/pgadmit/schema"
)

// gooseBuildTags leave out every database driver of goose's CLI but PostgreSQL's (the tags of
// goose v3.30.0's cmd/goose): the same as the README's install command.
const gooseBuildTags = "no_clickhouse no_libsql no_mssql no_mysql no_sqlite3 no_vertica no_ydb"

// TestGooseCLI holds the README's promise that operators can migrate with goose's own CLI, at
// the goose version of go.mod, on the SQL files of schema/ with -table pgadmit_goose_version,
// and that the CLI and schema.Migrate agree on the history each other wrote.
func TestGooseCLI(t *testing.T) {
	goose := buildGooseCLI(t)
	n := migrationCount(t)
	half := n / 2

	t.Run("up, down one step, up", func(t *testing.T) {
		url := pgtest.NewEmptyURL(t)
		pool := pgtest.OpenPool(t, url)
		runGoose(t, goose, url, "up")
		assertGooseVersion(t, goose, url, n)
		assertMigratedAndWorking(t, pool, n)

		runGoose(t, goose, url, "down")
		assertGooseVersion(t, goose, url, n-1)
		assertState(t, pool, n-1)

		runGoose(t, goose, url, "up")
		assertMigratedAndWorking(t, pool, n)
	})

	t.Run("the CLI halfway, then schema.Migrate", func(t *testing.T) {
		url := pgtest.NewEmptyURL(t)
		pool := pgtest.OpenPool(t, url)
		runGoose(t, goose, url, "up-to", fmt.Sprint(half))
		assertState(t, pool, half)
		if err := schema.Migrate(context.Background(), pool); err != nil {
			t.Fatalf("schema.Migrate after the CLI: %v", err)
		}
		assertMigratedAndWorking(t, pool, n)
		assertGooseVersion(t, goose, url, n)
	})

	t.Run("schema's provider halfway, then the CLI", func(t *testing.T) {
		url := pgtest.NewEmptyURL(t)
		pool := pgtest.OpenPool(t, url)
		p, err := schema.NewProvider(stdlib.OpenDBFromPool(pool))
		if err != nil {
			t.Fatalf("provider: %v", err)
		}
		if _, err := p.UpTo(context.Background(), int64(half)); err != nil {
			t.Fatalf("provider up to %d: %v", half, err)
		}
		if err := p.Close(); err != nil {
			t.Fatalf("provider close: %v", err)
		}
		assertGooseVersion(t, goose, url, half)
		runGoose(t, goose, url, "up")
		assertMigratedAndWorking(t, pool, n)

		// And back down to nothing with the CLI, which schema then reads as version 0.
		runGoose(t, goose, url, "reset")
		assertState(t, pool, 0)
	})
}

// buildGooseCLI builds goose's CLI at the version of github.com/pressly/goose/v3 in go.mod, with
// only its PostgreSQL driver, into the test's temporary directory, and returns its path. It
// needs the go command and the module proxy (or a module cache holding goose), as `go test`
// itself does; no go.mod is read or changed (`go install pkg@version`).
func buildGooseCLI(t *testing.T) string {
	t.Helper()
	version := strings.TrimSpace(goCommand(t, "", nil, "list", "-m", "-f", "{{.Version}}", "github.com/pressly/goose/v3"))
	if !strings.HasPrefix(version, "v3.") {
		t.Fatalf("go list: goose version %q", version)
	}
	bin := t.TempDir()
	goCommand(t, bin, []string{"GOBIN=" + bin, "GOFLAGS=", "CGO_ENABLED=0"},
		"install", "-tags", gooseBuildTags, "github.com/pressly/goose/v3/cmd/goose@"+version)
	assertReadmeShowsGoose(t, version)
	goose := filepath.Join(bin, "goose")
	out, err := exec.Command(goose, "-version").CombinedOutput()
	if err != nil {
		t.Fatalf("goose -version: %v\n%s", err, out)
	}
	if want := "goose version: " + version; strings.TrimSpace(string(out)) != want {
		t.Fatalf("goose -version = %q, want %q", strings.TrimSpace(string(out)), want)
	}
	return goose
}

// assertReadmeShowsGoose checks that the README's goose lines are the ones this test runs, at
// go.mod's goose version, so that a goose upgrade cannot leave them behind.
func assertReadmeShowsGoose(t *testing.T, version string) {
	t.Helper()
	text, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"go install -tags '" + gooseBuildTags + "' github.com/pressly/goose/v3/cmd/goose@" + version + "\n",
		"goose -dir schema -table " + schema.VersionTable + ` postgres "$DATABASE_URL" up `,
		"goose -dir schema -table " + schema.VersionTable + ` postgres "$DATABASE_URL" down `,
		"(" + version + ")",
	} {
		if !strings.Contains(string(text), line) {
			t.Errorf("README.md does not show %q", line)
		}
	}
}

// goCommand runs the go command in dir ("" for the test's own) with env added, failing the
// test when it fails, and returns its standard output.
func goCommand(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// runGoose runs the README's command line, `goose -dir schema -table pgadmit_goose_version
// postgres URL COMMAND...`, from the module root, and fails the test when it fails.
func runGoose(t *testing.T, goose, url string, command ...string) string {
	t.Helper()
	// goose's CLI also reads GOOSE_* variables and a .env file; neither may steer the test.
	args := append([]string{"-env", "none", "-dir", "schema", "-table", schema.VersionTable, "postgres", url}, command...)
	cmd := exec.Command(goose, args...)
	cmd.Dir = ".."
	cmd.Env = append(withoutGooseEnv(os.Environ()), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("goose %s: %v\n%s", strings.Join(command, " "), err, out)
	}
	return string(out)
}

func withoutGooseEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOOSE_") {
			kept = append(kept, kv)
		}
	}
	return kept
}

// assertGooseVersion checks that the CLI reads the version schema's migrations are at.
func assertGooseVersion(t *testing.T, goose, url string, applied int) {
	t.Helper()
	out := runGoose(t, goose, url, "version")
	if want := fmt.Sprintf("goose: version %d\n", applied); !strings.HasSuffix(out, want) {
		t.Fatalf("goose version printed %q, want it to end in %q", out, want)
	}
}

// assertMigratedAndWorking checks that schema reads every migration as applied, that Doctor
// finds nothing wrong, and that a Reserve and its Commit work.
func assertMigratedAndWorking(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	assertState(t, pool, n)
	report, err := ratelimit.NewMaintenance(pool).Doctor(ctx)
	if err != nil {
		t.Fatalf("Doctor: %v", err)
	}
	if !report.OK() {
		t.Fatalf("Doctor:\n%s", report)
	}
	l := ratelimit.New(pool)
	limits := []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: "goose-cli"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1}}
	r, err := l.Reserve(ctx, "", "", limits)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if _, err := l.Commit(ctx, r, nil); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}
