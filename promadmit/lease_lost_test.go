package promadmit_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A renewal that finds its lease gone was answered by a healthy database:
// it is counted as lease_lost (a request held a slot it no longer had),
// apart from the errors of a database that failed.
func TestLeaseLostIsNotADatabaseError(t *testing.T) {
	t.Parallel()
	reg, m := newRegistered(t)
	lost := fmt.Errorf("renew: %w", &ratelimit.LeaseLostError{LeaseIDs: []string{"l1"}})
	m.DatabaseCall(httpadmit.OpRenewLeases, time.Millisecond, lost)
	m.DatabaseCall(httpadmit.OpRenewLeases, time.Millisecond, errors.New("connection refused"))
	page := scrape(t, reg)
	for _, want := range []string{
		`pgadmit_db_operation_duration_seconds_count{operation="renew_leases",result="` + promadmit.ResultLeaseLost + `"} 1`,
		`pgadmit_db_operation_duration_seconds_count{operation="renew_leases",result="error"} 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, page)
		}
	}
}
