package main

import "testing"

// The advice on pgadmit's version table in other schemas names each as SQL writes it (quoted
// where it must be), escapes it for the URL, and, of several, leaves the choice to the operator.
// TestCommandsOnADatabaseMigratedIntoAnotherSchema runs the case of one plain schema.
func TestVersionTableElsewhereAdvice(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		w    versionTableElsewhere
		want string
	}{{
		versionTableElsewhere{current: "app", searchPath: "app", schemas: []string{"Rate Limits"}},
		`the database's pgadmit schema is at version 0 on this connection's search_path (app), but pgadmit's version table pgadmit_goose_version ` +
			`is in schema "Rate Limits": put that schema first in the search_path (search_path=%22Rate+Limits%22 in the database URL, ` +
			`or set on the role: README, "A schema of its own"), not 'pgadmit migrate up', which would install a second pgadmit in schema app`,
	}, {
		versionTableElsewhere{current: "", searchPath: "nosuch", schemas: []string{"pgadmit", "public"}},
		`the database's pgadmit schema is at version 0 on this connection's search_path (nosuch), but pgadmit's version table pgadmit_goose_version ` +
			`is in schemas pgadmit, public: put the one this pgadmit should use first in the search_path (search_path=<schema> in the database URL, ` +
			`or set on the role: README, "A schema of its own")`, // no current schema: migrate up would install nothing
	}, {
		versionTableElsewhere{current: "public", searchPath: "pgadmit, public", schemas: []string{"pgadmit", "tenant"}, role: "Gateway", noUsage: []string{"pgadmit"}},
		`the database's pgadmit schema is at version 0 on this connection's search_path (pgadmit, public), but pgadmit's version table pgadmit_goose_version ` +
			`is in schemas pgadmit, tenant (role "Gateway" has no USAGE on pgadmit, so PostgreSQL leaves it out of the search_path): ` +
			`put the one this pgadmit should use first in the search_path (search_path=<schema> in the database URL, or set on the role: README, "A schema of its own"), ` +
			`and GRANT USAGE ON SCHEMA <schema> TO "Gateway" if it has none (docs/privileges.sql grants it to its roles), ` +
			`not 'pgadmit migrate up', which would install a second pgadmit in schema public`,
	}} {
		if got := c.w.notMigrateUp(); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.w, got, c.want)
		}
	}
}
