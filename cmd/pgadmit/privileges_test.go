package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// An operator's sweeper runs as the maintenance role of docs/privileges.sql, which may not
// write a ledger row of its own: doctor, inspect, recover and prune each read the schema's
// version (and warn when a newer pgadmit migrated it) and do their work with its grants, here
// on what a gateway (its own role) left behind when it died: a task whose claim expired,
// holding a reservation and a lease.
func TestMaintenanceCommandsRunAsTheMaintenanceRole(t *testing.T) {
	t.Parallel()
	url, owner := newDatabase(t)
	gatewayURL, maintenanceURL := pgtest.LeastPrivilegeURLs(t, url)
	gateway := pgtest.OpenPool(t, gatewayURL)
	// inspect shows current windows only: the request's one-minute window
	// must not end before it runs (it did once in CI, a second past it).
	pgtest.AwaitRoomInWindow(t, gateway, time.Minute, 10*time.Second)
	gatewayRequest(t, gateway, time.Second)
	time.Sleep(1100 * time.Millisecond) // the task's claim expires

	sweeper := []string{"--database-url", maintenanceURL}
	if out := cliOK(t, append(sweeper, "inspect")...); !strings.Contains(out, "k1") {
		t.Errorf("inspect as the maintenance role does not show the gateway's counter:\n%s", out)
	}
	if out := cliOK(t, append(sweeper, "recover")...); !strings.Contains(out, "released 1 leases and 1 reservations") {
		t.Errorf("recover as the maintenance role:\n%s", out)
	}
	cliOK(t, append(sweeper, "prune", "--older-than", "1s")...)
	if out := cliOK(t, append(sweeper, "doctor")...); !strings.Contains(out, "the books balance") {
		t.Errorf("doctor as the maintenance role:\n%s", out)
	}

	// The gateway's role reads the version (docs/privileges.sql grants it, so that a gateway
	// may call schema.Migrate at start-up): no warning.
	if _, errOut, _ := cli(t, nil, "--database-url", gatewayURL, "inspect"); strings.Contains(errOut, "cannot read the schema version") {
		t.Errorf("inspect as the gateway's role:\n%s", errOut)
	}
	// A role that may not read the version (the gateway's, once that grant of
	// docs/privileges.sql is revoked) is told that the check was skipped.
	if err := dbtest.New().OpsRevokeGatewayVersionRead(context.Background(), owner); err != nil {
		t.Fatal(err)
	}
	_, errOut, _ := cli(t, nil, "--database-url", gatewayURL, "inspect")
	if !strings.Contains(errOut, "cannot read the schema version") || !strings.Contains(errOut, "docs/privileges.sql") {
		t.Errorf("inspect as a role that may not read the schema version:\n%s", errOut)
	}

	// The version it reads is the schema's: a newer pgadmit's migration is seen.
	pgtest.RecordNewerMigration(t, owner, 99999)
	if _, errOut, _ := cli(t, nil, append(sweeper, "doctor")...); !strings.Contains(errOut, "this pgadmit may misread it") {
		t.Errorf("doctor as the maintenance role on a schema a newer pgadmit migrated warns nothing:\n%s", errOut)
	}
}
