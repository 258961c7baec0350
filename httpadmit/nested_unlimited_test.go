package httpadmit_test

import (
	"net/http"
	"testing"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A fallback route whose inner middleware has no limits for the request
// lets it through to its upstream, as one that admits it does: the outer
// admission is committed, whichever route was tried first. It used to be
// released (refused_inside) when the other route refused the request, as
// if no upstream had run. A refusal further in, behind the middleware
// without limits, still releases it; and the handler behind that
// middleware still finds the outer grant (GrantFrom).
func TestNestedRefusalThenARouteWithoutLimitsCommitsTheOuterAdmission(t *testing.T) {
	t.Parallel()
	e := setup(t)
	org, key := uniqueKey("org"), uniqueKey("key")
	outer := e.middleware(fixed(window("org", org, ratelimit.MetricTokens, 100_000, 1000)))
	never := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Errorf("the upstream behind a full limit ran") })
	refused := e.middleware(fixed(window("api_key", key, ratelimit.MetricTokens, 0, 1000)))(never)
	unlimited := e.middleware(fixed()) // no limits for any request
	served := unlimited(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g, ok := httpadmit.GrantFrom(r.Context()); !ok || len(g.Reservations) != 1 || g.Reservations[0].ScopeKey != org {
			t.Errorf("GrantFrom behind a middleware without limits = %+v, %v; want the outer grant", g, ok)
		}
		w.WriteHeader(http.StatusOK)
	}))
	unlimitedThenRefused := unlimited(refused)
	triesRoutes(t, e, outer, org, "a route without limits", refused, served, unlimitedThenRefused)
	e.nothingHeld()
}
