package promadmit_test

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A nil *prometheus.Registry in the Registerer (a registry declared and
// never made) is refused as a nil reg is, with a *ratelimit.ValidationError
// on "reg": New used to panic in the registry's Register.
func TestNewRefusesATypedNilRegistry(t *testing.T) {
	t.Parallel()
	var reg *prometheus.Registry
	m, err := func() (m *promadmit.Metrics, err error) {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("New((*prometheus.Registry)(nil)) panicked: %v", p)
			}
		}()
		return promadmit.New(reg)
	}()
	var invalid *ratelimit.ValidationError
	if m != nil || !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "reg" {
		t.Errorf("New((*prometheus.Registry)(nil)) = %v, %v; want nil and a *ratelimit.ValidationError on reg", m, err)
	}
}
