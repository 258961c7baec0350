package ratelimit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// The defaults of the options are exported constants (callers such as
// pgadmit's own commands need them for flags and checks), and they are the
// values the code starts from.
func TestOptionDefaultsAreTheConstants(t *testing.T) {
	t.Parallel()
	got := defaultMaintenanceOptions()
	want := maintenanceOptions{
		recoveryBatchSize: DefaultRecoveryBatchSize,
		maxRequeues:       DefaultMaxRequeues,
		pruneBatchSize:    DefaultPruneBatchSize,
		taskRetention:     DefaultTaskRetention,
		leaseTTL:          DefaultMaintenanceLeaseTTL,
		lostGrace:         DefaultLostAllotmentGrace,
	}
	if got.recoveryBatchSize != want.recoveryBatchSize || got.maxRequeues != want.maxRequeues ||
		got.pruneBatchSize != want.pruneBatchSize || got.taskRetention != want.taskRetention ||
		got.leaseTTL != want.leaseTTL || got.lostGrace != want.lostGrace {
		t.Errorf("defaultMaintenanceOptions() = %+v, want the Default constants %+v", got, want)
	}
	var o maintenanceOptions
	WithLostAllotmentGrace(time.Nanosecond)(&o)
	if o.lostGrace != MinLostAllotmentGrace {
		t.Errorf("WithLostAllotmentGrace(1ns) sets %v, want MinLostAllotmentGrace (%v)", o.lostGrace, MinLostAllotmentGrace)
	}
	allot := AllotmentOptions{}.withDefaults()
	if allot.MaxShare != DefaultAllotmentMaxShare || allot.Horizon != DefaultAllotmentHorizon ||
		allot.IdleAfter != DefaultAllotmentIdleAfter || allot.Margin != DefaultAllotmentMargin {
		t.Errorf("AllotmentOptions{}.withDefaults() = %+v, want the DefaultAllotment constants", allot)
	}
}

// The docs of the options name the constant of each default (go doc links
// it, and a reader can use it), and where they also write its value out,
// that value is the constant's: a default changed in code alone fails here.
// No doc of the package writes a default as a bare number.
func TestOptionDocsNameTheirDefaults(t *testing.T) {
	t.Parallel()
	// doc owner (a function, a method, or Type.Field) -> the constants its doc must name.
	named := map[string][]string{
		"WithRecoveryBatchSize":      {"DefaultRecoveryBatchSize"},
		"WithMaxRequeues":            {"DefaultMaxRequeues"},
		"WithPruneBatchSize":         {"DefaultPruneBatchSize"},
		"WithTaskRetention":          {"DefaultTaskRetention"},
		"Maintenance.Prune":          {"DefaultTaskRetention"},
		"WithMaintenanceLeaseTTL":    {"DefaultMaintenanceLeaseTTL"},
		"WithLostAllotmentGrace":     {"DefaultLostAllotmentGrace", "MinLostAllotmentGrace"},
		"WithCombining":              {"DefaultCombineBatch", "DefaultCombineInFlight"},
		"AllotmentOptions.MaxShare":  {"DefaultAllotmentMaxShare"},
		"AllotmentOptions.Horizon":   {"DefaultAllotmentHorizon"},
		"AllotmentOptions.IdleAfter": {"DefaultAllotmentIdleAfter"},
		"AllotmentOptions.Margin":    {"DefaultAllotmentMargin"},
	}
	values := map[string]float64{
		"DefaultRecoveryBatchSize":   DefaultRecoveryBatchSize,
		"DefaultMaxRequeues":         DefaultMaxRequeues,
		"DefaultPruneBatchSize":      DefaultPruneBatchSize,
		"DefaultTaskRetention":       DefaultTaskRetention.Seconds(),
		"DefaultMaintenanceLeaseTTL": DefaultMaintenanceLeaseTTL.Seconds(),
		"DefaultLostAllotmentGrace":  DefaultLostAllotmentGrace.Seconds(),
		"MinLostAllotmentGrace":      MinLostAllotmentGrace.Seconds(),
		"DefaultCombineBatch":        DefaultCombineBatch,
		"DefaultCombineInFlight":     DefaultCombineInFlight,
		"DefaultAllotmentMaxShare":   DefaultAllotmentMaxShare,
		"DefaultAllotmentHorizon":    DefaultAllotmentHorizon.Seconds(),
		"DefaultAllotmentIdleAfter":  DefaultAllotmentIdleAfter.Seconds(),
		"DefaultAllotmentMargin":     DefaultAllotmentMargin.Seconds(),
	}
	fset, files, docs := packageDocs(t)
	bare := regexp.MustCompile(`\(default [0-9]`)
	for _, file := range files {
		for _, group := range file.Comments {
			if m := bare.FindString(group.Text()); m != "" {
				t.Errorf("%s: %q: name the default's constant (default DefaultX, value)", fset.Position(group.Pos()), m)
			}
		}
	}
	for owner, consts := range named {
		doc := strings.Join(strings.Fields(docs[owner]), " ")
		if doc == "" {
			t.Errorf("%s: no doc found", owner)
			continue
		}
		for _, c := range consts {
			if !regexp.MustCompile(`\b` + c + `\b`).MatchString(doc) {
				t.Errorf("%s's doc does not name %s", owner, c)
				continue
			}
			// "Name, value" where the doc writes the value out.
			for _, m := range regexp.MustCompile(`\b`+c+`, ([0-9][0-9/.]*(?: ?[a-z]+)?)`).FindAllStringSubmatch(doc, -1) {
				v, ok := docValue(m[1])
				if !ok {
					t.Errorf("%s's doc: %s, %q: not a value this test reads", owner, c, m[1])
				} else if v != values[c] {
					t.Errorf("%s's doc says %s is %s, the code has %v", owner, c, m[1], values[c])
				}
			}
		}
	}
}

// docValue reads a value as the docs write it: 500, 1/16, 7 days, 15 s,
// 100ms (durations in seconds).
func docValue(s string) (float64, bool) {
	if a, b, ok := strings.Cut(s, "/"); ok {
		x, err1 := strconv.ParseFloat(a, 64)
		y, err2 := strconv.ParseFloat(b, 64)
		return x / y, err1 == nil && err2 == nil && y != 0
	}
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		return n, true
	}
	num, unit, _ := strings.Cut(s, " ")
	switch unit {
	case "days", "day":
		n, err := strconv.ParseFloat(num, 64)
		return n * 24 * 3600, err == nil
	case "":
		d, err := time.ParseDuration(s)
		return d.Seconds(), err == nil
	default:
		d, err := time.ParseDuration(num + unit)
		return d.Seconds(), err == nil
	}
}

// The docs also state bounds that are no option's, by value: the 256
// reservations of one settle call (settleChunk) and the 5 s timeout of the
// statements that take and give up a maintenance lease
// (leaseStatementTimeout), within which they wait 4 s for a lock, and the
// give-backs Close waits for that run at once on an Executor of one's own
// that shows no pool (half of pgxpool's default MaxConns), and how many of
// them wait their turn at most (queuedAtMost). Each value written is the
// code's.
func TestDocsStateTheCodesBounds(t *testing.T) {
	t.Parallel()
	chunk := strconv.Itoa(settleChunk)
	timeout := strconv.Itoa(int(leaseStatementTimeout / time.Second))
	lockWait := strconv.Itoa(int((leaseStatementTimeout - time.Second) / time.Second))
	checks := []struct {
		owner, pattern, want string
	}{
		{"WithCombining", `each of (\d+) reservations`, chunk},
		{"WithRecoveryBatchSize", `released (\d+) at most per statement`, chunk},
		{"WithPruneBatchSize", `released (\d+) at most per statement`, chunk},
		{"Limiter.Commit", `more than (\d+) reservations`, chunk},
		{"Limiter.Commit", `calls of (\d+) sent together`, chunk},
		{"WithMaintenanceLockTimeout", `besides, (\d+) s`, timeout},
		{"WithMaintenanceLockTimeout", `never more than (\d+) s`, lockWait},
		{"WithMaintenanceLockTimeout", `wait (\d+) s at most too`, lockWait},
		{"Limiter.Close", `which is (\d+) or the number of CPUs`, strconv.Itoa(pgxpoolLeastMaxConns)},
		{"Limiter.Close", `(\d+) waiting per one running`, strconv.Itoa(queuedAtMost(1))},
		{"Limiter.Close", `(\d+) in all, beyond`, strconv.Itoa(queuedCeiling)},
	}
	_, _, docs := packageDocs(t)
	for _, c := range checks {
		doc := strings.Join(strings.Fields(docs[c.owner]), " ")
		m := regexp.MustCompile(c.pattern).FindStringSubmatch(doc)
		switch {
		case m == nil:
			t.Errorf("%s's doc no longer says %q", c.owner, c.pattern)
		case m[1] != c.want:
			t.Errorf("%s's doc: %q is %s, the code's is %s", c.owner, m[0], m[1], c.want)
		}
	}
}

// packageDocs parses the package's source and returns the doc of each
// function (Type.Method for a method) and each struct field (Type.Field),
// by name.
func packageDocs(t *testing.T) (*token.FileSet, []*ast.File, map[string]string) {
	t.Helper()
	fset, files, err := gosrc.ParseDir(".", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	for _, file := range files {
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				name := n.Name.Name
				if n.Recv != nil && len(n.Recv.List) == 1 {
					typ := n.Recv.List[0].Type
					if star, ok := typ.(*ast.StarExpr); ok {
						typ = star.X
					}
					if id, ok := typ.(*ast.Ident); ok {
						name = id.Name + "." + name
					}
				}
				docs[name] = n.Doc.Text()
			case *ast.TypeSpec:
				if st, ok := n.Type.(*ast.StructType); ok {
					for _, f := range st.Fields.List {
						for _, id := range f.Names {
							docs[n.Name.Name+"."+id.Name] = f.Doc.Text()
						}
					}
				}
			}
			return true
		})
	}
	return fset, files, docs
}

// pgxpoolLeastMaxConns is pgxpool's: a pool_max_conns not set is the
// number of CPUs, pgxpoolLeastMaxConns at least.
func TestPgxpoolLeastMaxConnsIsPgxpools(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	if want := max(pgxpoolLeastMaxConns, runtime.NumCPU()); int(cfg.MaxConns) != want {
		t.Errorf("pgxpool's default MaxConns is %d, want %d (the number of CPUs, %d at least)", cfg.MaxConns, want, pgxpoolLeastMaxConns)
	}
	if got := defaultUnheldAtOnce(); got != int(cfg.MaxConns)/2 {
		t.Errorf("defaultUnheldAtOnce() = %d, want %d: half of pgxpool's default MaxConns", got, cfg.MaxConns/2)
	}
}

// WithAdvisoryLockPrefix's doc names every family of advisory-lock keys
// the schema and the queries take ('pgadmit/<family>/...'): the queue
// scopes', which take the prefix, and each family that keeps its hashed
// keys whatever the prefix, so that a host application choosing its own
// keys knows all of pgadmit's. It named the concurrency scopes' alone,
// not the task fences' ('pgadmit/task/...', schema 00020).
func TestAdvisoryLockPrefixDocNamesEveryLockFamily(t *testing.T) {
	t.Parallel()
	family := regexp.MustCompile(`'pgadmit/([a-z_]+)/`)
	found := map[string]bool{}
	for _, glob := range []string{"../schema/*.sql", "../queries/*.sql"} {
		files, err := filepath.Glob(glob)
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v, %d files", glob, err, len(files))
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range family.FindAllStringSubmatch(string(b), -1) {
				found[m[1]] = true
			}
		}
	}
	if !found["queue"] || !found["concurrent"] {
		t.Fatalf("lock families found %v, want queue and concurrent among them", found)
	}
	_, _, docs := packageDocs(t)
	doc := strings.Join(strings.Fields(docs["WithAdvisoryLockPrefix"]), " ")
	for f := range found {
		if f == "queue" { // the one under the prefix
			continue
		}
		if !strings.Contains(doc, "'pgadmit/"+f+"/...'") {
			t.Errorf("WithAdvisoryLockPrefix's doc does not name the keys of 'pgadmit/%s/...', which keep their hash whatever the prefix", f)
		}
	}
}
