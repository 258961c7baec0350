package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/schema"
)

// privilegeError is a command's failure when the database refused its role a privilege
// (SQLSTATE 42501, insufficient_privilege): for recover and prune a role without
// docs/privileges.sql's maintenance grants, the gateway's say, which may not even take the run's
// lease; for doctor and inspect, which only read, a role in neither group of it; for migrate up
// and down any role but the owner of pgadmit's tables (a role of docs/privileges.sql is refused
// the lock table), and for status and version, which read the version table alone, one that
// neither owns it nor is in a group of docs/privileges.sql. The server's message names a table,
// not who may: this says which roles may, and whether the run did anything.
type privilegeError struct {
	err     error
	job     string // "recover", "prune", "doctor", "inspect", or "migrate " and its subcommand
	counted bool   // the run's counts were printed: it did part of its work (recover, prune)
}

func (e *privilegeError) Error() string {
	var did, who string
	switch e.job {
	case "doctor", "inspect":
		did, who = "the books were not checked", "a member of pgadmit_gateway or pgadmit_maintenance"
		if e.job == "inspect" {
			did = "no table was shown"
		}
	case "migrate up", "migrate down":
		who = "the role that owns pgadmit's tables (the roles of docs/privileges.sql, pgadmit_gateway and pgadmit_maintenance, may not migrate)"
	case "migrate status", "migrate version":
		who = "the role that owns pgadmit's tables, or as a member of pgadmit_gateway or pgadmit_maintenance, to which " +
			"docs/privileges.sql grants the read of " + schema.VersionTable
	default: // recover, prune
		did, who = "it did nothing", "a member of pgadmit_maintenance"
	}
	if !strings.HasPrefix(e.job, "migrate ") {
		who += ", to which docs/privileges.sql grants what " + e.job + " needs"
	}
	if e.counted {
		did = "it left what was refused (what it did is counted)"
	}
	if did != "" {
		did = ", and " + did
	}
	return fmt.Sprintf("the database refused this role a privilege that %s needs%s: run it as %s (%v)", e.job, did, who, e.err)
}

func (e *privilegeError) Unwrap() error { return e.err }

// privilegeDenied returns err as a *privilegeError when the server refused a privilege anywhere
// in it, for the run of job (a command, or migrate's "migrate up" and so on) that printed its
// counts or not (counted); other errors pass through unchanged.
func privilegeDenied(err error, job string, counted bool) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return &privilegeError{err: err, job: job, counted: counted}
	}
	return err
}
