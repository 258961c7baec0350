package main

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// privilegeError is a run's failure when the database refused its role a privilege (SQLSTATE
// 42501, insufficient_privilege): for recover and prune a role without docs/privileges.sql's
// maintenance grants, the gateway's say, which may not even take the run's lease; for doctor and
// inspect, which only read, a role in neither group of it. The server's message names a table,
// not what to grant: this says which roles of docs/privileges.sql have it, and whether the run
// did anything.
type privilegeError struct {
	err     error
	job     string // "recover", "prune", "doctor" or "inspect"
	counted bool   // the run's counts were printed: it did part of its work (recover, prune)
}

func (e *privilegeError) Error() string {
	roles, did := "pgadmit_maintenance", "it did nothing"
	switch e.job {
	case "doctor":
		roles, did = "pgadmit_gateway or pgadmit_maintenance", "the books were not checked"
	case "inspect":
		roles, did = "pgadmit_gateway or pgadmit_maintenance", "no table was shown"
	}
	if e.counted {
		did = "it left what was refused (what it did is counted)"
	}
	return fmt.Sprintf("the database refused this role a privilege that %s needs, and %s: run it as a member of %s, "+
		"to which docs/privileges.sql grants what %s needs (%v)", e.job, did, roles, e.job, e.err)
}

func (e *privilegeError) Unwrap() error { return e.err }

// privilegeDenied returns err as a *privilegeError when the server refused a privilege anywhere
// in it, for the run of job that printed its counts or not (counted); other errors pass through
// unchanged.
func privilegeDenied(err error, job string, counted bool) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return &privilegeError{err: err, job: job, counted: counted}
	}
	return err
}
