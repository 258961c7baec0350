package pgtest

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

var (
	//go:embed privileges_logins.sql
	privilegeLogins string
	//go:embed privileges_drop.sql
	privilegeRolesDrop string
	//go:embed role_login.sql
	roleLogin string
	//go:embed role_drop.sql
	roleDrop string
	//go:embed role_search_path.sql
	roleSearchPath string
)

// loginPassword is the password of the login roles of [LeastPrivilegeURLs], for servers that
// ask for one (the throwaway cluster and the CI server trust 127.0.0.1).
const loginPassword = "pgadmit-test"

// LeastPrivilegeURLs runs docs/privileges.sql in the database of dbURL (one [NewURL] made), with
// role names of the test's own (roles belong to the whole server, which tests share), adds a
// login role to each of its two groups, and returns the database's URL as the login role of
// pgadmit_gateway, then as the one of pgadmit_maintenance. The roles are dropped when t ends.
func LeastPrivilegeURLs(t testing.TB, dbURL string) (gateway, maintenance string) {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatalf("pgtest: cannot find docs/privileges.sql")
	}
	grants, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "docs", "privileges.sql"))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	suffix := roleSuffix()
	gatewayRole, maintenanceRole := "pgadmit_gateway_"+suffix, "pgadmit_maintenance_"+suffix
	run := adminScripts(t, dbURL, strings.NewReplacer("pgadmit_gateway", gatewayRole, "pgadmit_maintenance", maintenanceRole))
	// Registered first, so that the roles a script failing halfway created go too.
	t.Cleanup(func() {
		if err := run(privilegeRolesDrop); err != nil {
			t.Errorf("pgtest: drop the test's roles: %v", err)
		}
	})
	if err := run(string(grants)); err != nil {
		t.Fatalf("pgtest: docs/privileges.sql: %v", err)
	}
	if err := run(privilegeLogins); err != nil {
		t.Fatalf("pgtest: login roles: %v", err)
	}
	return asRole(t, dbURL, gatewayRole+"_login"), asRole(t, dbURL, maintenanceRole+"_login")
}

// NoGrantsURL creates a login role of the test's own, named pgadmit_test_<suffix> (roles belong
// to the whole server, which tests share), that is granted nothing: it may do what PUBLIC may
// (connect, use public), and no more. It returns dbURL (a database of [NewURL], its parameters
// kept) as that role, and the role's name. The role is dropped when t ends.
func NoGrantsURL(t testing.TB, dbURL string) (roleURL, role string) {
	t.Helper()
	role = "pgadmit_test_" + roleSuffix()
	run := adminScripts(t, dbURL, strings.NewReplacer("pgadmit_test_role", role))
	t.Cleanup(func() {
		if err := run(roleDrop); err != nil {
			t.Errorf("pgtest: drop the test's role: %v", err)
		}
	})
	if err := run(roleLogin); err != nil {
		t.Fatalf("pgtest: login role: %v", err)
	}
	return asRole(t, dbURL, role), role
}

// SetRoleSearchPath sets the search_path of role (one of [NoGrantsURL]) to schema alone, on
// the role (ALTER ROLE ... SET search_path), in the database server of dbURL: its sessions start
// with it where their URL sets none. The role's drop removes the setting.
func SetRoleSearchPath(t testing.TB, dbURL, role, schema string) {
	t.Helper()
	names := strings.NewReplacer("pgadmit_test_role", pgx.Identifier{role}.Sanitize(), "pgadmit_test_schema", pgx.Identifier{schema}.Sanitize())
	if err := adminScripts(t, dbURL, names)(roleSearchPath); err != nil {
		t.Fatalf("pgtest: set the role's search_path: %v", err)
	}
}

// roleSuffix is a random suffix for the names of a test's roles.
func roleSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// adminScripts returns a function that runs a script in the database of dbURL as the server's
// own role (adminURL), its role names replaced by names: one simple query, no arguments, every
// statement in it.
func adminScripts(t testing.TB, dbURL string, names *strings.Replacer) func(script string) error {
	t.Helper()
	admin := adminURL(t, dbURL)
	return func(script string) error {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, names.Replace(script))
		return err
	}
}

// adminURL returns dbURL (a database of [NewURL], its parameters kept) as the server's own role:
// DATABASE_URL's, or the throwaway cluster's superuser, who may create roles.
func adminURL(t testing.TB, dbURL string) string {
	t.Helper()
	base, err := server()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	user, uerr := url.PathUnescape(base.User) // configFromURL escaped them
	password, perr := url.PathUnescape(base.Password)
	if uerr != nil || perr != nil {
		t.Fatalf("pgtest: the server's credentials: %v", errors.Join(uerr, perr))
	}
	return withUser(t, dbURL, user, password)
}

// asRole returns dbURL as role, with loginPassword.
func asRole(t testing.TB, dbURL, role string) string {
	t.Helper()
	return withUser(t, dbURL, role, loginPassword)
}

// withUser returns dbURL with user and password in place of its own.
func withUser(t testing.TB, dbURL, user, password string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: parse database URL: %v", err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// AdminURL returns dbURL (a database of [NewURL]) as the server's own role, a superuser who may
// change what PostgreSQL's own functions grant in that database (pg_proc is the database's).
func AdminURL(t testing.TB, dbURL string) string {
	t.Helper()
	return adminURL(t, dbURL)
}

// ReadOnlyURL returns dbURL with every transaction of its sessions read-only, as on a hot
// standby, or for a role or database with default_transaction_read_only on: the server refuses
// their writes with SQLSTATE 25006 (read_only_sql_transaction).
func ReadOnlyURL(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	q := u.Query()
	q.Set("default_transaction_read_only", "on")
	u.RawQuery = q.Encode()
	return u.String()
}
