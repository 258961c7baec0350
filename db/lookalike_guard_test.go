package db_test

import (
	"context"
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/gosrc"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// The guard of docs/lookalikes.md: every call of a function, aggregate, window function or
// operator in the statements of queries/*.sql (the constants of package db) matches
// pg_catalog's exactly, or names pg_catalog, or is a call of pgadmit's own functions with
// their exact types. A function or operator of another schema on the gateway's search_path
// that matched a call exactly where pg_catalog's needs an implicit cast, is polymorphic or
// takes "any", or where the call passes a quoted literal that pg_catalog's takes as no
// string type, would run in its place, as the gateway.
//
// Each statement is prepared on a connection with debug_print_parse on and client_min_messages
// at log, so that the server sends its analysed query tree as a notice (nothing is executed,
// no server log is read). In that tree every FUNCEXPR (a call, not a cast), AGGREF,
// WINDOWFUNC, OPEXPR, DISTINCTEXPR, NULLIFEXPR, SCALARARRAYOPEXPR and ROWCOMPAREEXPR is
// looked up in pg_proc or pg_operator (LookalikeGuardRoutines, LookalikeGuardOperators), and
// a call is loose when
//
//   - the function or operator has a pseudo-type parameter (anyarray, anyelement, "any"...);
//   - an argument was cast implicitly to the parameter's type (a FUNCEXPR, RELABELTYPE,
//     COERCEVIAIO, ARRAYCOERCEEXPR, CONVERTROWTYPEEXPR or COERCETODOMAIN of implicit format);
//   - an argument is a quoted literal (no :: or CAST after it) for a parameter that is not
//     text (for an operator: whose two operand types differ), or a bare NULL;
//
// or when a cast is written as a function call (text(x)), which is resolved by name too. A
// loose call of pg_catalog's that names pg_catalog (pg_catalog.unnest(...),
// OPERATOR(pg_catalog.<@)) is exact by construction. A call of pgadmit's own functions
// (pgadmit_*, which cannot name their schema) must not be loose. A call resolved anywhere
// else fails. judgedFine lists the exceptions, each with its reason; an entry that no longer
// matches fails too.
//
// Not covered: the statements of queries/dbtest/ (test-only, never run as the gateway; many
// call built-ins loosely), and the bodies of pgadmit's functions in schema/ (00021 made them
// exact): PL/pgSQL analyses each statement of a body only when it first runs it, branch by
// branch, and the tree it sends then does not carry the statement's text (which says whether
// a call names pg_catalog), and a SQL-language body is analysed when called or inlined into
// the caller's plan (which sends no tree), so that no pass like this one reaches them all;
// TestFunctionsIgnoreLookalikesOutsideTheirSchema (ratelimit) plants lookalikes of the calls
// they make instead. A utility statement (CALL, CREATE EXTENSION) has no printable tree: each
// must be listed in utilityStatements.
func TestStatementsCallBuiltinsExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Now()
	statements := dbStatements(t)
	if missing := queryNames(t, "../queries/*.sql"); !slices.EqualFunc(missing, statements, func(n string, s statement) bool { return n == s.name }) {
		var found []string
		for _, s := range statements {
			found = append(found, s.name)
		}
		t.Fatalf("statement constants in db/*.sql.go:\n\t%v\nthe queries of queries/*.sql:\n\t%v", found, missing)
	}
	url := pgtest.NewURL(t)
	// BenchStatementStats calls pg_stat_statements(true): the extension must exist in the
	// database for the statement to be analysed (its library need not be loaded).
	extension := db.New().BenchStatementStatsCreate(ctx, pgtest.OpenPool(t, pgtest.AdminURL(t, url)))
	if extension != nil {
		t.Logf("BenchStatementStats is not checked: pg_stat_statements cannot be created here: %v", extension)
	}
	g := newLookalikeGuard(t, url)

	used := make([]bool, len(judgedFine))
	utility := map[string]bool{}
	calls := 0
	for _, st := range statements {
		if st.name == "BenchStatementStats" && extension != nil {
			continue
		}
		rep, err := g.check(ctx, st.sql)
		if err != nil {
			t.Errorf("%s: %v", st.name, err)
			continue
		}
		calls += len(rep.calls)
		if rep.utility {
			utility[st.name] = true
			if _, ok := utilityStatements[st.name]; !ok {
				t.Errorf("%s is a utility statement, whose analysed tree PostgreSQL does not print: check its calls by hand and add it to utilityStatements with what it calls", st.name)
			}
		}
		for _, c := range rep.calls {
			for _, p := range c.problems {
				if i := judgedFineIndex(st.name, c, p); i >= 0 {
					used[i] = true
					continue
				}
				t.Errorf("%s: %s %s.%s is not exact: %s\n\tat: %s\n\tname pg_catalog (pg_catalog.f(...), OPERATOR(pg_catalog.op)) or cast the argument to the parameter's type; see docs/lookalikes.md",
					st.name, c.kind, c.schema, c.signature, p, c.snippet)
			}
		}
	}
	for i, f := range judgedFine {
		if !used[i] && !(f.statement == "BenchStatementStats" && extension != nil) {
			t.Errorf("judgedFine entry %s / %s / %q matches no call any more: remove it", f.statement, f.signature, f.problem)
		}
	}
	names := map[string]bool{}
	for _, st := range statements {
		names[st.name] = true
	}
	for name := range utilityStatements {
		switch {
		case !names[name]:
			t.Errorf("utilityStatements lists %s, which is no statement of db/ any more: remove it", name)
		case !utility[name]:
			t.Errorf("utilityStatements lists %s, whose tree PostgreSQL prints (no utility statement): remove it, so that its calls are checked", name)
		}
	}
	if calls < 500 {
		t.Errorf("checked %d calls in %d statements; the audit found about 580: the tree walk misses calls", calls, len(statements))
	}
	t.Logf("checked %d calls in %d statements in %v", calls, len(statements), time.Since(start).Round(time.Millisecond))
}

// The guard flags each kind of loose call (LookalikeProbeLoose) and no exact one
// (LookalikeProbeExact), which compute the same values.
func TestStatementsCallBuiltinsExactlyFlagsLooseCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewURL(t)
	g := newLookalikeGuard(t, url)

	loose, err := g.check(ctx, dbtest.LookalikeProbeLoose)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range loose.calls {
		for _, p := range c.problems {
			got = append(got, c.signature+": "+p)
		}
	}
	slices.Sort(got)
	want := []string{
		`>(numeric,numeric): argument 2: implicit cast "numeric"(integer)`,
		"array_agg(anynonarray): a pseudo-type parameter (polymorphic or \"any\")",
		"date_bin(interval,timestamp with time zone,timestamp with time zone): argument 3: a quoted literal of unknown type for a parameter of type timestamp with time zone: write 'literal'::type",
		"hashtextextended(text,bigint): argument 2: implicit cast int8(integer)",
		"unnest(anyarray): a pseudo-type parameter (polymorphic or \"any\")",
	}
	if !slices.Equal(got, want) {
		t.Errorf("LookalikeProbeLoose's findings:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}

	exact, err := g.check(ctx, dbtest.LookalikeProbeExact)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, c := range exact.calls {
		seen = append(seen, c.signature)
		for _, p := range c.problems {
			t.Errorf("LookalikeProbeExact: %s flagged: %s", c.signature, p)
		}
	}
	for _, s := range []string{">(numeric,numeric)", "array_agg(anynonarray)", "date_bin(interval,timestamp with time zone,timestamp with time zone)", "hashtextextended(text,bigint)", "unnest(anyarray)"} {
		if !slices.Contains(seen, s) {
			t.Errorf("LookalikeProbeExact: the guard did not see its call of %s (saw %v)", s, seen)
		}
	}

	pool := pgtest.OpenPool(t, url)
	l, err := dbtest.New().LookalikeProbeLoose(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	e, err := dbtest.New().LookalikeProbeExact(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if l.Hash != e.Hash || !slices.Equal(l.Sorted, e.Sorted) || !l.Binned.Equal(e.Binned) || l.Above != e.Above || !e.Above || e.Hash == 0 {
		t.Errorf("the exact calls compute %+v, the loose ones %+v", e, l)
	}
}

// judgedFine lists the loose calls of db/'s statements judged fine (docs/lookalikes.md), by
// statement, signature (as regprocedure or regoperator shows it) and problem.
var judgedFine = []struct{ statement, signature, problem, why string }{
	{
		"CounterCheckWindows", "date_bin(interval,timestamp with time zone,timestamp with time zone)",
		"argument 3: a quoted literal of unknown type",
		"the origin is the typed literal timestamptz 'epoch', of type timestamptz, not a literal of unknown type: the guard sees a constant whose text is followed by no :: and cannot tell",
	},
	{
		"BenchStatementStats", "pg_stat_statements(boolean)", "resolved outside pg_catalog",
		"the extension's function, in whatever schema the extension was created (pgadmit bench only): it cannot be named with a schema",
	},
}

// utilityStatements lists the statements of db/ that are utility statements, whose analysed
// tree PostgreSQL does not print, with what they call.
var utilityStatements = map[string]string{
	"AdmissionHotCommit":        "CALL pgadmit_hot_commit(): pgadmit's procedure, no arguments",
	"BenchStatementStatsCreate": "CREATE EXTENSION pg_stat_statements: calls nothing by name",
}

func judgedFineIndex(statement string, c guardCall, problem string) int {
	for i, f := range judgedFine {
		if f.statement == statement && f.signature == c.signature && strings.HasPrefix(problem, f.problem) {
			return i
		}
	}
	return -1
}

type statement struct{ name, sql string }

// queryNames returns the names of the queries of the files of glob, sorted.
func queryNames(t *testing.T, glob string) []string {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			if rest, ok := strings.CutPrefix(line, "-- name: "); ok {
				names = append(names, strings.Fields(rest)[0])
			}
		}
	}
	slices.Sort(names)
	return names
}

// dbStatements returns each statement constant of package db: the string constants of
// db/*.sql.go that begin with sqlc's "-- name:" line.
func dbStatements(t *testing.T) []statement {
	t.Helper()
	_, files, err := gosrc.ParseDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []statement
	for gen, spec := range gosrc.Specs(files) {
		vs, ok := spec.(*ast.ValueSpec)
		if !ok || gen.Tok != token.CONST || len(vs.Values) != 1 {
			continue
		}
		sql, ok := stringConstant(vs.Values[0])
		if ok && strings.HasPrefix(sql, "-- name: "+vs.Names[0].Name+" ") {
			out = append(out, statement{vs.Names[0].Name, sql})
		}
	}
	slices.SortFunc(out, func(a, b statement) int { return strings.Compare(a.name, b.name) })
	return out
}

// stringConstant is the value of e, a string literal or a sum of them (sqlc writes a
// backquote of a statement as ` + "`" + `).
func stringConstant(e ast.Expr) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		l, ok := stringConstant(x.X)
		r, ok2 := stringConstant(x.Y)
		return l + r, ok && ok2 && x.Op == token.ADD
	case *ast.ParenExpr:
		return stringConstant(x.X)
	}
	return "", false
}
