package db_test

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

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
