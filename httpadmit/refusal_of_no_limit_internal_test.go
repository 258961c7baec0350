package httpadmit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// A refusal that names no limit of the request (a Limiter that broke its word) reaches the error
// handler as httpadmit's error, naming one package: it read "httpadmit: refusal names no limit of
// the request: ratelimit: ...". It is still the refusal for errors.As and errors.Is.
func TestRefusalOfNoLimitNamesOnePackage(t *testing.T) {
	t.Parallel()
	other := &ratelimit.ExceededError{ScopeType: "tenant", ScopeKey: "t2", Metric: "requests",
		Message: "rate limit exceeded: requests window of tenant:t2 has 0 of 10 left, 1 needed; retry after 3s"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{&ratelimit.ExceededError{}, "httpadmit: refusal names no limit of the request: limit exceeded"},
		{fmt.Errorf("ratelimit: reserve: %w", other), "httpadmit: refusal names no limit of the request: reserve: " + other.Message},
		{other, "httpadmit: refusal names no limit of the request: " + other.Message},
	} {
		err := refusalOfNoLimit(c.err)
		if got := err.Error(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
		var exceeded *ratelimit.ExceededError
		if !errors.As(err, &exceeded) || !errors.Is(err, ratelimit.ErrExceeded) {
			t.Errorf("%q: errors.As *ratelimit.ExceededError %v, errors.Is ErrExceeded %v; want both", err, exceeded != nil, errors.Is(err, ratelimit.ErrExceeded))
		}
	}
}
