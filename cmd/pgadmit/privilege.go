package main

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// privilegeError is a recover or prune run's failure when the database refused its role a
// privilege (SQLSTATE 42501, insufficient_privilege): a role without docs/privileges.sql's
// maintenance grants, the gateway's say, may not even take the run's lease. The server's message
// names a table, not what to grant: this says which role of docs/privileges.sql has it, and
// whether the run did anything.
type privilegeError struct {
	err     error
	job     string // "recover" or "prune"
	counted bool   // the run's counts were printed: it did part of its work
}

func (e *privilegeError) Error() string {
	did := "it did nothing"
	if e.counted {
		did = "it left what was refused (what it did is counted)"
	}
	return fmt.Sprintf("the database refused this role a privilege that %s needs, and %s: run it as a member of pgadmit_maintenance, "+
		"which docs/privileges.sql grants what recover and prune need (%v)", e.job, did, e.err)
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
