package httpadmit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// renewPanicObserver is a recorder whose DatabaseCall panics on every lease
// renewal, after recording it.
type renewPanicObserver struct{ *recorder }

func (o renewPanicObserver) DatabaseCall(op string, took time.Duration, err error) {
	o.recorder.DatabaseCall(op, took, err)
	if op == httpadmit.OpRenewLeases {
		panic(errCallback)
	}
}

// A panic in the Observer's DatabaseCall of a lease renewal happens on the
// goroutine that renews the leases, not the request's, where net/http
// would recover it: it crashed the whole process (the gateway, for a
// metrics bug). It is recovered and logged with its stack, the renewals go
// on (the leases still need them), and the request is settled as usual.
func TestPanicInARenewalsDatabaseCallIsLoggedNotFatal(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	slot := concurrent("model", key, 1)
	slot.LeaseTTL = time.Second // renewed every 333 ms
	h := e.middleware(fixed(slot), httpadmit.WithObserver(renewPanicObserver{e.obs}))(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			// Two renewals: the goroutine outlived the first one's panic.
			for deadline := time.Now().Add(30 * time.Second); e.obs.callCounts()["renew_leases ok"] < 2 ||
				!strings.Contains(e.logs.String(), "pgadmit: panic renewing leases"); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("no two renewals and a logged panic in 30s: %v\n%s", e.obs.callCounts(), e.logs)
					return
				}
			}
		}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	logs := e.logs.String()
	for _, want := range []string{"level=ERROR", errCallback.Error(), "renewLeases"} { // the value, and the stack
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	if got := e.obs.callCounts()["commit ok"]; got != 1 {
		t.Errorf("%d commits, want 1: %v", got, e.obs.callCounts())
	}
	if got := e.obs.heldLeases(); got != 0 {
		t.Errorf("LeasesHeld sums to %d, want 0", got)
	}
	e.nothingHeld()
}
