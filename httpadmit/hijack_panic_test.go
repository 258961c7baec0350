package httpadmit_test

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A handler that panics after it took the connection is settled as any
// panicking handler: released as handler_panic, whether the panic is
// http.ErrAbortHandler or another, unless it reported usage, which is
// committed (the upstream spent it). The hijack changes nothing but what
// the middleware can see: net/http leaves the connection to the handler,
// so the session it wrote there reaches the client whole.
func TestHandlerPanicsAfterHijack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := uniqueKey("key")
	mw := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 10_000, 1000)))
	srv := httptest.NewUnstartedServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn := answerHijacked(t, w)
		if conn == nil {
			return
		}
		defer conn.Close()
		switch r.URL.Path {
		case "/panic":
			panic(errors.New("boom"))
		case "/abort":
			panic(http.ErrAbortHandler)
		case "/reported":
			_ = httpadmit.ReportUsage(r.Context(), map[string]float64{ratelimit.MetricTokens: 7})
			panic(http.ErrAbortHandler)
		}
	})))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the stack of the boom
	srv.Start()
	defer srv.Close()
	for _, tc := range []struct {
		path string
		want book // tokens after this request
	}{
		{"/panic", book{}},
		{"/abort", book{}},
		{"/reported", book{Used: 7}},
	} {
		getHijacked(t, srv.URL+tc.path)
		e.nothingHeld()
		if got := e.books("api_key", key, ratelimit.MetricTokens); got != tc.want {
			t.Errorf("%s: tokens = %+v, want %+v", tc.path, got, tc.want)
		}
	}
	if got := e.obs.callCounts(); got["release ok"] != 2 || got["commit ok"] != 1 {
		t.Errorf("database calls %v, want 2 releases and 1 commit", got)
	}
}
