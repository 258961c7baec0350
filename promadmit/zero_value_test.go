package promadmit_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Metrics not made with New (a zero value, or a nil *Metrics: an Observer
// left unset) observe nothing, and their Recover and Prune fail with a
// *ratelimit.ValidationError on "Metrics" without running the maintenance:
// every method used to panic on a nil Prometheus vector. Every exported
// method is called, through reflection, so that one added later is too.
// A combining collector of a zero Limiter collects zeros rather than
// panicking in Limiter.Stats.
func TestZeroMetricsDoNotPanic(t *testing.T) {
	t.Parallel()
	maint := ratelimit.NewMaintenance(pgtest.NewPool(t)) // would run, and succeed, were it called
	args := map[reflect.Type]any{
		reflect.TypeFor[context.Context]():          context.Background(),
		reflect.TypeFor[*ratelimit.Maintenance]():   maint,
		reflect.TypeFor[time.Duration]():            time.Hour,
		reflect.TypeFor[string]():                   promadmit.OpRecover,
		reflect.TypeFor[int]():                      1,
		reflect.TypeFor[[]httpadmit.LimitOutcome](): []httpadmit.LimitOutcome{{Limit: limit("team", "k", "requests", 10, 1, httpadmit.Enforce), Outcome: httpadmit.OutcomeAdmitted, Utilization: 0.9}},
	}
	errType := reflect.TypeFor[error]()
	for name, m := range map[string]*promadmit.Metrics{"Metrics{}": {}, "(*Metrics)(nil)": nil} {
		recv := reflect.ValueOf(m)
		var called []string
		for i := range recv.NumMethod() {
			method := recv.Type().Method(i)
			called = append(called, method.Name)
			in := make([]reflect.Value, method.Type.NumIn()-1)
			for j := range in {
				if a, ok := args[method.Type.In(j+1)]; ok {
					in[j] = reflect.ValueOf(a)
				} else {
					in[j] = reflect.Zero(method.Type.In(j + 1))
				}
			}
			out, panicked := func() (out []reflect.Value, panicked any) {
				defer func() { panicked = recover() }()
				return recv.Method(i).Call(in), nil
			}()
			if panicked != nil {
				t.Errorf("%s.%s panicked: %v", name, method.Name, panicked)
				continue
			}
			for _, o := range out {
				if o.Type() != errType {
					continue
				}
				err, _ := o.Interface().(error)
				var invalid *ratelimit.ValidationError
				if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != "Metrics" {
					t.Errorf("%s.%s: err = %v, want a *ratelimit.ValidationError on Metrics", name, method.Name, err)
				} else if want := map[string]any{"Metrics{}": "Metrics{}"}[name]; invalid.Value != want {
					t.Errorf("%s.%s: err = %v, its Value %v, want %v", name, method.Name, err, invalid.Value, want)
				}
			}
		}
		if len(called) < 7 { // Decided, DatabaseCall, LeasesHeld, Recover, Prune, ObserveRecover, ObservePrune
			t.Errorf("%s: called %v", name, called)
		}
	}

	c, err := promadmit.NewCombiningCollector(&ratelimit.Limiter{})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan prometheus.Metric, 100)
	panicked := func() (panicked any) {
		defer func() { panicked = recover() }()
		c.Collect(ch) // in this goroutine: a registry collects in its own
		return nil
	}()
	if panicked != nil || len(ch) == 0 {
		t.Errorf("combining collector of a zero Limiter: %d metrics collected, panic %v", len(ch), panicked)
	}
}
