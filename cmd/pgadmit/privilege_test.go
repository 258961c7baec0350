package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A refused privilege is told as such however deep in a run's joined errors it lies, and says
// whether the run did anything: a step refused after others ran (a table a newer migration made,
// before docs/privileges.sql was run again) left counts that were printed. Other errors pass
// through as they are.
func TestPrivilegeDenied(t *testing.T) {
	t.Parallel()
	refused := &pgconn.PgError{Code: "42501", Message: "permission denied for table gateway_task_events"}
	err := errors.Join(errors.New("prune: reservations: rejected"), fmt.Errorf("prune: events: %w", refused))
	for _, c := range []struct {
		counted bool
		says    string
	}{{false, "it did nothing"}, {true, "what it did is counted"}} {
		got := privilegeDenied(err, "prune", c.counted)
		var pe *privilegeError
		if !errors.As(got, &pe) || !errors.Is(got, refused) {
			t.Errorf("privilegeDenied(counted %t) = %#v; want a *privilegeError wrapping the refusal", c.counted, got)
			continue
		}
		msg := got.Error()
		for _, want := range []string{"privilege that prune needs", c.says, "pgadmit_maintenance", "docs/privileges.sql", "gateway_task_events"} {
			if !strings.Contains(msg, want) {
				t.Errorf("privilegeDenied(counted %t) does not say %q: %s", c.counted, want, msg)
			}
		}
	}
	// doctor and inspect only read: the gateway's role runs them too, and what they left undone
	// is what a cut-off of theirs says.
	for job, undone := range map[string]string{"doctor": "the books were not checked", "inspect": "no table was shown"} {
		msg := privilegeDenied(fmt.Errorf("%s: %w", job, refused), job, false).Error()
		for _, want := range []string{"privilege that " + job + " needs", undone, "pgadmit_gateway or pgadmit_maintenance", "docs/privileges.sql"} {
			if !strings.Contains(msg, want) {
				t.Errorf("privilegeDenied of %s does not say %q: %s", job, want, msg)
			}
		}
		if strings.Contains(msg, "recover") || strings.Contains(msg, "prune") {
			t.Errorf("privilegeDenied of %s speaks of recover or prune: %s", job, msg)
		}
	}
	// migrate's are told the same way, with who may run it: up and down need the owner of
	// pgadmit's tables; status and version read the version table, as docs/privileges.sql lets
	// its roles do. What goose said comes last, as the server's refusal does in the others.
	for sub, who := range map[string]string{"up": "may not migrate", "down": "may not migrate",
		"status": "pgadmit_gateway or pgadmit_maintenance", "version": "pgadmit_gateway or pgadmit_maintenance"} {
		job := "migrate " + sub
		msg := privilegeDenied(fmt.Errorf("acquire lock: %w", refused), job, false).Error()
		for _, want := range []string{"the database refused this role a privilege that " + job + " needs: run it as the role that owns pgadmit's tables",
			who, "docs/privileges.sql", "(acquire lock: "} {
			if !strings.Contains(msg, want) {
				t.Errorf("privilegeDenied of %s does not say %q: %s", job, want, msg)
			}
		}
		if !strings.HasPrefix(msg, "the database refused") || strings.Contains(msg, "did nothing") {
			t.Errorf("privilegeDenied of %s does not start with the refusal, or says what it did: %s", job, msg)
		}
	}
	other := fmt.Errorf("recover: %w", &pgconn.PgError{Code: "55P03"})
	if got := privilegeDenied(other, "recover", false); got != other {
		t.Errorf("privilegeDenied of a lock wait = %v; want it unchanged", got)
	}
	if got := privilegeDenied(nil, "recover", false); got != nil {
		t.Errorf("privilegeDenied(nil) = %v", got)
	}
}
