package main

import (
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// mask replaces a password wherever pgadmit would otherwise print it.
const mask = "xxxxx"

var (
	// keyword/value form: password=secret, password='sec ret', sslpassword=...
	// (an unquoted value may hold backslash-escaped spaces, as libpq and pgx read it)
	kvPassword = regexp.MustCompile(`((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:\\.|\S)*)`)
	// URL query parameters: ?password=secret&..., &sslpassword=... (libpq and pgx end a value
	// at '&' only: a '#' is part of it)
	queryPassword = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)[^&\s]*`)
	// a URL's userinfo inside keyword/value form: a connection URL pasted with its variable's
	// name (DATABASE_URL=postgres://u:secret@h/d, a line of an env file), which pgx reads as a
	// setting named DATABASE_URL (or one given as a dbname); up to the token's last '@', as
	// splitUserinfo masks: more than the password at worst, never less
	kvUserinfo = regexp.MustCompile(`(://[^:/?#@\s']*:)([^\s']*)@`)
)

// isURL reports whether dsn is in URL form rather than keyword/value form.
func isURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// splitUserinfo returns the parts of a connection URL around its userinfo: what precedes the
// password (scheme and user, with the colon), the raw password, and what follows it (from the
// '@' on). ok is false when the URL has no password. It works on malformed URLs too.
func splitUserinfo(dsn string) (before, password, after string, ok bool) {
	i := strings.Index(dsn, "://")
	if i < 0 {
		return "", "", "", false
	}
	rest := dsn[i+3:]
	// pgx and libpq end the userinfo at an '@' before the first '/', so a '?' or '#' in a
	// password needs no escaping; a password meant to hold an unescaped '/' ends at an '@'
	// before the query instead. Mask up to the later of the two: more than the password at
	// worst, never less.
	at := max(lastAtBefore(rest, "/"), lastAtBefore(rest, "?#"))
	if at < 0 {
		return "", "", "", false
	}
	colon := strings.Index(rest[:at], ":")
	if colon < 0 {
		return "", "", "", false
	}
	return dsn[:i+3+colon+1], rest[colon+1 : at], rest[at:], true
}

// lastAtBefore is the index of the last '@' of s before the first of the characters in stop,
// or -1.
func lastAtBefore(s, stop string) int {
	if i := strings.IndexAny(s, stop); i >= 0 {
		s = s[:i]
	}
	return strings.LastIndex(s, "@")
}

// redactDSN returns dsn with every password in it (userinfo, password= and sslpassword=
// parameters) replaced by xxxxx, in URL or keyword/value form, well-formed or not.
func redactDSN(dsn string) string {
	if isURL(dsn) {
		if before, pw, after, ok := splitUserinfo(dsn); ok && pw != "" {
			dsn = before + mask + after
		}
		return queryPassword.ReplaceAllString(dsn, "${1}"+mask)
	}
	return kvUserinfo.ReplaceAllString(kvPassword.ReplaceAllString(dsn, "${1}"+mask), "${1}"+mask+"@")
}

// secretsOf returns every password that dsn holds, raw and decoded, longest first.
func secretsOf(dsn string) []string {
	var out []string
	add := func(s string) {
		s = strings.Trim(s, "'")
		if s == "" || s == mask {
			return
		}
		out = append(out, s)
		if dec, err := url.QueryUnescape(s); err == nil && dec != s {
			out = append(out, dec)
		}
		if dec, err := url.PathUnescape(s); err == nil && dec != s {
			out = append(out, dec)
		}
	}
	if isURL(dsn) {
		if _, pw, _, ok := splitUserinfo(dsn); ok {
			add(pw)
		}
		for _, m := range queryPassword.FindAllString(dsn, -1) {
			_, v, _ := strings.Cut(m, "=")
			add(v)
		}
	} else {
		for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
			add(m[2])
		}
		for _, m := range kvUserinfo.FindAllStringSubmatch(dsn, -1) {
			add(m[2])
		}
	}
	// Longest first, so that a password that contains another is masked whole.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// scrub makes msg safe to print for a program that was given dsn: the DSN itself is replaced by
// its redacted form, then any password of it left in msg (pgx and net/url errors can quote a
// connection string, or part of one) is masked. Newlines become "; " so that every error stays
// on one line.
func scrub(msg, dsn string) string {
	if dsn != "" {
		msg = strings.ReplaceAll(msg, dsn, redactDSN(dsn))
		for _, s := range secretsOf(dsn) {
			msg = strings.ReplaceAll(msg, s, mask)
			// As a %q verb quotes it (usage errors quote arguments): a password with a quote, a
			// backslash or a non-printable character reads differently there.
			if q := strconv.Quote(s); q[1:len(q)-1] != s {
				msg = strings.ReplaceAll(msg, q[1:len(q)-1], mask)
			}
		}
	}
	msg = strings.ReplaceAll(msg, "\r", "")
	msg = strings.ReplaceAll(msg, ":\n\t", ": ")
	msg = strings.ReplaceAll(msg, "\n\t", "; ")
	msg = strings.ReplaceAll(msg, "\n", "; ")
	return msg
}

// scrubArgs is scrub for each argument of a command line, and for the value of each -flag=value
// one: a connection string given where pgadmit expects something else (a positional argument, a
// command name, the value of another flag) is quoted back by the usage error that refuses it.
func scrubArgs(msg string, args []string) string {
	for _, arg := range args {
		if strings.HasPrefix(arg, "-") {
			if _, v, ok := strings.Cut(arg, "="); ok {
				arg = v
			}
		}
		msg = scrub(msg, arg)
	}
	return msg
}
