package db_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

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

// lookalikeGuard prepares statements on a connection that gets their analysed trees as
// notices, and looks up what they call on a pool.
type lookalikeGuard struct {
	conn     *pgconn.PgConn
	trees    []string // the notices of the statement being prepared
	catalog  *pgxpool.Pool
	routines map[uint32]calleeInfo
	ops      map[uint32]calleeInfo
}

type calleeInfo struct {
	schema, name, signature string
	argTypes                []uint32
	argTypeNames            []string
	pseudo                  bool
}

func newLookalikeGuard(t *testing.T, url string) *lookalikeGuard {
	t.Helper()
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	g := &lookalikeGuard{catalog: pgtest.OpenPool(t, url), routines: map[uint32]calleeInfo{}, ops: map[uint32]calleeInfo{}}
	cfg.RuntimeParams["client_min_messages"] = "log"
	cfg.RuntimeParams["debug_print_parse"] = "on"
	cfg.RuntimeParams["debug_pretty_print"] = "off"
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if n.Message == "parse tree:" {
			g.trees = append(g.trees, n.Detail)
		}
	}
	g.conn, err = pgconn.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.conn.Close(context.Background()) })
	return g
}

// guardReport is what check found in one statement.
type guardReport struct {
	utility bool
	calls   []guardCall
}

type guardCall struct {
	kind              string // function, aggregate, window function, operator, cast call
	schema, signature string
	problems          []string // empty when exact
	snippet           string
}

// check prepares sql (the unnamed statement), and judges every call in its analysed tree.
func (g *lookalikeGuard) check(ctx context.Context, sql string) (guardReport, error) {
	g.trees = nil
	if _, err := g.conn.Prepare(ctx, "", sql, nil); err != nil {
		return guardReport{}, fmt.Errorf("prepare: %w", err)
	}
	if len(g.trees) != 1 {
		return guardReport{}, fmt.Errorf("%d parse trees sent for one statement, want 1 (debug_print_parse and client_min_messages=log in force?)", len(g.trees))
	}
	tree, err := parseNodeTree(g.trees[0])
	if err != nil {
		return guardReport{}, err
	}
	if tree.typ != "QUERY" {
		return guardReport{}, fmt.Errorf("the tree is a %s, not a QUERY", tree.typ)
	}
	var found []rawCall
	if err := collectCalls(tree, &found); err != nil {
		return guardReport{}, err
	}
	if err := g.lookUp(ctx, found); err != nil {
		return guardReport{}, err
	}
	rep := guardReport{utility: tree.str("commandType") == "6"}
	for _, rc := range found {
		rep.calls = append(rep.calls, g.judge(sql, rc))
	}
	return rep, nil
}

// A rawCall is a call found in a tree: a function (funcid) or an operator (opno), with its
// arguments in the order of the callee's parameters.
type rawCall struct {
	kind     string
	oid      uint32
	operator bool
	args     []any
	location int
}

// lookUp fetches what the calls and the implicit casts of their arguments name.
func (g *lookalikeGuard) lookUp(ctx context.Context, calls []rawCall) error {
	var routines, ops []pgtype.Uint32
	want := func(oid uint32, operator bool) {
		m, list := g.routines, &routines
		if operator {
			m, list = g.ops, &ops
		}
		if _, ok := m[oid]; !ok && !slices.Contains(*list, pgtype.Uint32{Uint32: oid, Valid: true}) {
			*list = append(*list, pgtype.Uint32{Uint32: oid, Valid: true})
		}
	}
	for _, c := range calls {
		if c.oid != 0 {
			want(c.oid, c.operator)
		}
		for _, a := range c.args {
			if n := coercion(a); n != nil && n.typ == "FUNCEXPR" {
				want(n.oid("funcid"), false)
			}
		}
	}
	q := dbtest.New()
	if len(routines) > 0 {
		rows, err := q.LookalikeGuardRoutines(ctx, g.catalog, routines)
		if err != nil {
			return err
		}
		for _, r := range rows {
			g.routines[r.Oid.Uint32] = calleeInfo{r.SchemaName, r.Name, r.Signature, uint32s(r.ArgTypes), r.ArgTypeNames, r.Pseudo}
		}
	}
	if len(ops) > 0 {
		rows, err := q.LookalikeGuardOperators(ctx, g.catalog, ops)
		if err != nil {
			return err
		}
		for _, r := range rows {
			g.ops[r.Oid.Uint32] = calleeInfo{r.SchemaName, r.Name, r.Signature, uint32s(r.ArgTypes), r.ArgTypeNames, r.Pseudo}
		}
	}
	for _, oid := range routines {
		if _, ok := g.routines[oid.Uint32]; !ok {
			return fmt.Errorf("function %d is not in pg_proc", oid.Uint32)
		}
	}
	for _, oid := range ops {
		if _, ok := g.ops[oid.Uint32]; !ok {
			return fmt.Errorf("operator %d is not in pg_operator", oid.Uint32)
		}
	}
	return nil
}

func uint32s(l []pgtype.Uint32) []uint32 {
	out := make([]uint32, len(l))
	for i, v := range l {
		out[i] = v.Uint32
	}
	return out
}

const (
	textOID    = 25
	coerceCall = "0" // CoercionForm COERCE_EXPLICIT_CALL: a function call (or a cast spelt as one)
	coerceAuto = "2" // COERCE_IMPLICIT_CAST: a cast PostgreSQL added
)

func (g *lookalikeGuard) judge(src string, rc rawCall) guardCall {
	c := guardCall{kind: rc.kind, snippet: snippet(src, rc.location)}
	if rc.kind == "cast call" {
		c.schema, c.signature = "pg_catalog", "a cast"
		if !qualifiedAt(src, rc.location, false) {
			c.problems = append(c.problems, "a cast written as a function call, resolved by name: write x::type")
		}
		return c
	}
	info := g.routines[rc.oid]
	if rc.operator {
		info = g.ops[rc.oid]
	}
	c.schema, c.signature = info.schema, info.signature
	params := info.argTypes
	if rc.operator && len(rc.args) == 1 && len(params) == 2 && params[0] == 0 {
		params = params[1:] // a prefix operator
	}
	var problems []string
	if info.pseudo {
		problems = append(problems, `a pseudo-type parameter (polymorphic or "any")`)
	}
	for i, a := range rc.args {
		literalOK := i < len(params) && params[i] == textOID // a text parameter wins over a lookalike's
		if rc.operator {
			literalOK = len(params) == 2 && params[0] == params[1] // an unknown operand takes the other's type
		}
		param := "the variadic parameter"
		if i < len(params) {
			param = "a parameter of type " + info.argTypeNames[i+len(info.argTypes)-len(params)]
		}
		if p := g.argProblem(src, a, literalOK, param); p != "" {
			problems = append(problems, fmt.Sprintf("argument %d: %s", i+1, p))
		}
	}
	switch {
	case info.schema == "pg_catalog":
		if !qualifiedAt(src, rc.location, rc.operator) {
			c.problems = problems
		}
	case strings.HasPrefix(info.name, "pgadmit_"):
		c.problems = problems // pgadmit's own: cannot name its schema, so it must be exact
	default:
		c.problems = append([]string{"resolved outside pg_catalog, and not one of pgadmit's functions"}, problems...)
	}
	return c
}

// argProblem says how argument a does not match its parameter (param) exactly, or "".
func (g *lookalikeGuard) argProblem(src string, a any, literalOK bool, param string) string {
	n, _ := a.(*treeNode)
	if n == nil {
		return ""
	}
	if c := coercion(n); c != nil {
		if c.typ == "FUNCEXPR" {
			return "implicit cast " + g.routines[c.oid("funcid")].signature
		}
		return "implicit " + strings.ToLower(c.typ) + " to type " + c.str("resulttype")
	}
	n = unwrapArg(n)
	if n.typ != "CONST" {
		return ""
	}
	loc, err := strconv.Atoi(n.str("location"))
	if err != nil || loc < 0 || loc >= len(src) {
		return ""
	}
	rest := src[loc:]
	if isNull(rest) && !castFollows(rest[4:]) {
		return "NULL of unknown type: write NULL::type"
	}
	if literalOK {
		return ""
	}
	if end := quotedLiteralEnd(rest); end > 0 && !castFollows(rest[end:]) && !castPrecedes(src[:loc]) {
		return "a quoted literal of unknown type for " + param + ": write 'literal'::type"
	}
	return ""
}

// coercion returns the implicit coercion PostgreSQL added around an argument, or nil.
func coercion(a any) *treeNode {
	n, _ := a.(*treeNode)
	if n == nil {
		return nil
	}
	n = unwrapArg(n)
	format := map[string]string{
		"FUNCEXPR": "funcformat", "RELABELTYPE": "relabelformat", "COERCEVIAIO": "coerceformat",
		"ARRAYCOERCEEXPR": "coerceformat", "CONVERTROWTYPEEXPR": "convertformat", "COERCETODOMAIN": "coercionformat",
	}[n.typ]
	if format != "" && n.str(format) == coerceAuto {
		return n
	}
	return nil
}

// unwrapArg is the expression of a named argument (f(x => e)) or an aggregate's argument.
func unwrapArg(n *treeNode) *treeNode {
	for {
		var inner any
		switch n.typ {
		case "NAMEDARGEXPR":
			inner = n.fields["arg"]
		case "TARGETENTRY":
			inner = n.fields["expr"]
		default:
			return n
		}
		next, _ := inner.(*treeNode)
		if next == nil {
			return n
		}
		n = next
	}
}

var (
	castAfter   = regexp.MustCompile(`^\s*::`)
	castBefore  = regexp.MustCompile(`(?i)\bCAST\s*\(\s*$`)
	nullWord    = regexp.MustCompile(`(?i)^NULL\b`)
	qualifiedFn = regexp.MustCompile(`^(?i:"?pg_catalog"?)\s*\.`)
	qualifiedOp = regexp.MustCompile(`^(?i:OPERATOR)\s*\(\s*(?i:"?pg_catalog"?)\s*\.`)
)

func castFollows(s string) bool  { return castAfter.MatchString(s) }
func castPrecedes(s string) bool { return castBefore.MatchString(s) }
func isNull(s string) bool       { return nullWord.MatchString(s) }

// quotedLiteralEnd returns the length of the quoted literal s begins with ('...', E'...'),
// or 0.
func quotedLiteralEnd(s string) int {
	i := 0
	if len(s) > 1 && (s[0] == 'E' || s[0] == 'e') && s[1] == '\'' {
		i = 1
	}
	if i >= len(s) || s[i] != '\'' {
		return 0
	}
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && i == 1:
			j++
		case s[j] == '\'' && j+1 < len(s) && s[j+1] == '\'':
			j++
		case s[j] == '\'':
			return j + 1
		}
	}
	return 0
}

// qualifiedAt reports whether the call at byte offset loc of src names pg_catalog.
func qualifiedAt(src string, loc int, operator bool) bool {
	if loc < 0 || loc >= len(src) {
		return false
	}
	if operator {
		return qualifiedOp.MatchString(src[loc:])
	}
	return qualifiedFn.MatchString(src[loc:])
}

func snippet(src string, loc int) string {
	if loc < 0 || loc >= len(src) {
		return "?"
	}
	s := src[loc:]
	if len(s) > 80 {
		s = s[:80]
	}
	return strings.Join(strings.Fields(s), " ")
}

// callHolders are the nodes that call a function or operator resolved by name; nameless are
// those known to resolve none by name (their operators, if any, come from a type's default
// operator class, or they hold calls only in their children). A node of any other type fails
// the guard: judge it, then add it to one of them.
var nameless = map[string]bool{
	"QUERY": true, "TARGETENTRY": true, "ALIAS": true, "VAR": true, "CONST": true, "PARAM": true,
	"RANGETBLENTRY": true, "RANGETBLREF": true, "RANGETBLFUNCTION": true, "FROMEXPR": true,
	"JOINEXPR": true, "COMMONTABLEEXPR": true, "SETOPERATIONSTMT": true, "SORTGROUPCLAUSE": true,
	"WINDOWCLAUSE": true, "ROWMARKCLAUSE": true, "ONCONFLICTEXPR": true, "INFERENCEELEM": true,
	"SUBLINK": true, "BOOLEXPR": true, "NULLTEST": true, "BOOLEANTEST": true, "CASEEXPR": true,
	"CASEWHEN": true, "CASETESTEXPR": true, "COALESCEEXPR": true, "MINMAXEXPR": true,
	"ARRAYEXPR": true, "ROWEXPR": true, "NAMEDARGEXPR": true, "COLLATEEXPR": true,
	"SUBSCRIPTINGREF": true, "FIELDSELECT": true, "SQLVALUEFUNCTION": true, "SETTODEFAULT": true,
	"NEXTVALUEEXPR": true, "COERCETODOMAINVALUE": true, "RTEPERMISSIONINFO": true,
	// Casts: resolved through pg_cast, not by name, unless spelt as a function call
	// (format COERCE_EXPLICIT_CALL), which collectCalls reports.
	"RELABELTYPE": true, "COERCEVIAIO": true, "ARRAYCOERCEEXPR": true, "CONVERTROWTYPEEXPR": true,
	"COERCETODOMAIN": true,
}

// collectCalls appends to calls every call of n's tree resolved by name.
func collectCalls(v any, calls *[]rawCall) error {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if err := collectCalls(e, calls); err != nil {
				return err
			}
		}
		return nil
	case *treeNode:
		if err := x.calls(calls); err != nil {
			return err
		}
		for _, k := range x.keys {
			if err := collectCalls(x.fields[k], calls); err != nil {
				return err
			}
		}
	}
	return nil
}

func (n *treeNode) calls(calls *[]rawCall) error {
	loc, err := strconv.Atoi(n.str("location"))
	if err != nil {
		loc = -1
	}
	add := func(kind string, oid uint32, operator bool, args []any) {
		*calls = append(*calls, rawCall{kind: kind, oid: oid, operator: operator, args: args, location: loc})
	}
	switch n.typ {
	case "FUNCEXPR":
		switch n.str("funcformat") {
		case coerceCall:
			add("function", n.oid("funcid"), false, n.list("args"))
		case "1", coerceAuto, "3":
			// A cast, explicit or implicit, or SQL syntax (extract, substring...), which the
			// grammar names pg_catalog's function for.
		default:
			return fmt.Errorf("FUNCEXPR of funcformat %q", n.str("funcformat"))
		}
	case "AGGREF":
		add("aggregate", n.oid("aggfnoid"), false, append(n.list("aggdirectargs"), n.list("args")...))
	case "WINDOWFUNC":
		add("window function", n.oid("winfnoid"), false, n.list("args"))
	case "OPEXPR", "DISTINCTEXPR", "NULLIFEXPR", "SCALARARRAYOPEXPR":
		add("operator", n.oid("opno"), true, n.list("args"))
	case "ROWCOMPAREEXPR":
		opnos, largs, rargs := n.list("opnos"), n.list("largs"), n.list("rargs")
		if len(opnos) > 0 && opnos[0] == "o" {
			opnos = opnos[1:]
		}
		if len(opnos) != len(largs) || len(largs) != len(rargs) {
			return fmt.Errorf("ROWCOMPAREEXPR of %d operators, %d and %d arguments", len(opnos), len(largs), len(rargs))
		}
		for i, o := range opnos {
			s, _ := o.(string)
			oid, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return fmt.Errorf("ROWCOMPAREEXPR operator %v", o)
			}
			add("operator", uint32(oid), true, []any{largs[i], rargs[i]})
		}
	case "RELABELTYPE", "COERCEVIAIO", "ARRAYCOERCEEXPR":
		field := "coerceformat"
		if n.typ == "RELABELTYPE" {
			field = "relabelformat"
		}
		if n.str(field) == coerceCall {
			add("cast call", 0, false, nil)
		}
	default:
		if !nameless[n.typ] {
			return fmt.Errorf("node %s in the tree: the guard does not know whether it resolves a function or operator by name", n.typ)
		}
	}
	return nil
}

// treeNode is a node of PostgreSQL's text form of a tree (nodeToString): {TYPE :field value
// ...}, a value being a token, a node, a list (...) or <> for none.
type treeNode struct {
	typ    string
	keys   []string
	fields map[string]any // string, *treeNode, []any or nil
}

func (n *treeNode) str(f string) string {
	s, _ := n.fields[f].(string)
	return s
}

func (n *treeNode) oid(f string) uint32 {
	v, _ := strconv.ParseUint(n.str(f), 10, 32)
	return uint32(v)
}

func (n *treeNode) list(f string) []any {
	l, _ := n.fields[f].([]any)
	return slices.Clone(l)
}

var nodeStart = regexp.MustCompile(`(?:^|[^\\])\{([A-Z][A-Z_]*)`)

// parseNodeTree parses a tree as debug_print_parse sends it, and checks that it found every
// node of the text.
func parseNodeTree(s string) (*treeNode, error) {
	l := &treeLexer{s: s}
	tok, _ := l.next()
	if tok != "{" {
		return nil, fmt.Errorf("a tree begins with %q", tok)
	}
	root, err := l.node()
	if err != nil {
		return nil, err
	}
	if tok, ok := l.next(); ok {
		return nil, fmt.Errorf("text after the tree: %q", tok)
	}
	want := map[string]int{}
	for _, m := range nodeStart.FindAllStringSubmatch(s, -1) {
		want[m[1]]++
	}
	got := map[string]int{}
	var count func(v any)
	count = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				count(e)
			}
		case *treeNode:
			got[x.typ]++
			for _, k := range x.keys {
				count(x.fields[k])
			}
		}
	}
	count(root)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return nil, fmt.Errorf("parsed nodes %v, the text has %v", got, want)
	}
	return root, nil
}

type treeLexer struct {
	s string
	i int
}

func (l *treeLexer) next() (string, bool) {
	for l.i < len(l.s) && strings.IndexByte(" \n\t\r", l.s[l.i]) >= 0 {
		l.i++
	}
	if l.i >= len(l.s) {
		return "", false
	}
	if c := l.s[l.i]; strings.IndexByte("{}()", c) >= 0 {
		l.i++
		return string(c), true
	}
	start := l.i
	for l.i < len(l.s) {
		c := l.s[l.i]
		if c == '\\' {
			l.i += 2
			continue
		}
		if strings.IndexByte(" \n\t\r{}()", c) >= 0 {
			break
		}
		l.i++
	}
	if l.i > len(l.s) {
		l.i = len(l.s)
	}
	return l.s[start:l.i], true
}

func (l *treeLexer) peek() string {
	save := l.i
	t, _ := l.next()
	l.i = save
	return t
}

var errTreeEnd = errors.New("the tree ends early")

// node parses a node's body, after its "{".
func (l *treeLexer) node() (*treeNode, error) {
	typ, ok := l.next()
	if !ok {
		return nil, errTreeEnd
	}
	n := &treeNode{typ: typ, fields: map[string]any{}}
	for {
		tok, ok := l.next()
		switch {
		case !ok:
			return nil, errTreeEnd
		case tok == "}":
			return n, nil
		case !strings.HasPrefix(tok, ":"):
			return nil, fmt.Errorf("%s: %q where a :field was expected", typ, tok)
		}
		key := tok[1:]
		var v any
		if p := l.peek(); p != "}" && !strings.HasPrefix(p, ":") {
			var err error
			if v, err = l.value(); err != nil {
				return nil, err
			}
		}
		n.keys = append(n.keys, key)
		n.fields[key] = v
	}
}

func (l *treeLexer) value() (any, error) {
	tok, ok := l.next()
	if !ok {
		return nil, errTreeEnd
	}
	switch tok {
	case "{":
		return l.node()
	case "(":
		var list []any
		for l.peek() != ")" {
			if l.peek() == "" {
				return nil, errTreeEnd
			}
			v, err := l.value()
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		l.next()
		return list, nil
	case "<>":
		return nil, nil
	}
	if l.peek() == "[" { // a datum: its length, then [ bytes ]
		for {
			b, ok := l.next()
			if !ok {
				return nil, errTreeEnd
			}
			if b == "]" {
				break
			}
		}
	}
	return tok, nil
}
