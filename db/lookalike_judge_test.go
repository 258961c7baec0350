package db_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

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
