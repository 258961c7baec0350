package textcell

import (
	"strconv"
	"strings"
)

// Scope shows a scope as TYPE:KEY, each part as Show shows it, and its type quoted when it holds
// a ":" too: the first ":" that is not inside quotes ends the type, so that type "a:b" with key
// "c" ("a:b":c) and type "a" with key "b:c" (a:b:c) read apart. A key may hold ":" unquoted.
// ParseScope reads it back.
func Scope(typ, key string) string {
	t := Show(typ)
	if t == typ && strings.Contains(typ, ":") {
		t = quote(typ)
	}
	return t + ":" + Show(key)
}

// ParseScope reads a scope as Scope shows it: TYPE:KEY, where a part that begins with a quote is
// one Go-quoted string (strconv.Unquote) and any other is the text itself; the type ends at its
// closing quote or at the first ":", the key is the rest. Scope never shows a part unquoted that
// begins with a quote, nor a type unquoted that holds a ":", so it reads back every scope Scope
// shows, and an operator types a plain one as it is (api_key:team-42). ok is false when s has no
// ":" after its type, or a part that begins with a quote is not one quoted string; the parts are
// not checked further (they may be empty).
func ParseScope(s string) (typ, key string, ok bool) {
	var rest string
	if strings.HasPrefix(s, `"`) {
		q, err := strconv.QuotedPrefix(s)
		if err != nil {
			return "", "", false
		}
		typ, _ = strconv.Unquote(q) // QuotedPrefix found it one quoted string
		rest, ok = strings.CutPrefix(s[len(q):], ":")
	} else {
		typ, rest, ok = strings.Cut(s, ":")
	}
	if !ok {
		return "", "", false
	}
	if !strings.HasPrefix(rest, `"`) {
		return typ, rest, true
	}
	key, err := strconv.Unquote(rest)
	if err != nil {
		return "", "", false
	}
	return typ, key, true
}
