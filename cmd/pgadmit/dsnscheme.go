package main

import "regexp"

// urlScheme is the scheme of a connection string in URL form.
var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// checkScheme refuses a database URL of a scheme other than postgres:// and postgresql://, as a
// usage error that says so: pgx reads any other as keyword/value settings and says only that it
// cannot parse it. A keyword/value string (host=... dbname=...) passes.
func checkScheme(dsn string) error {
	m := urlScheme.FindStringSubmatch(dsn)
	if m == nil || isURL(dsn) {
		return nil
	}
	// The scheme holds no password: the pattern admits no ':' or '@'.
	return usagef(`the database URL's scheme must be postgres:// or postgresql://, not %s:// (a key=value string such as "host=... dbname=..." works too)`, m[1])
}
