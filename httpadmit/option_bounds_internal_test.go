package httpadmit

import (
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// What each Option does with the values its doc names: the default New
// applies when it is not given, the values it takes as they are, and the
// ones that make New fail with a *ratelimit.ValidationError (errors.Is
// ratelimit.ErrInvalidInput) naming the option. Zero, negative, the
// smallest and largest durations and every bit of a HeaderFamily: none
// panics, none is changed on the way. New, on a limiter made from a nil
// pool, applies them as on a real one.
func TestOptionsKeepTheirDocumentedBounds(t *testing.T) {
	t.Parallel()
	const (
		maxDur = time.Duration(math.MaxInt64)
		minDur = time.Duration(math.MinInt64)
	)
	// The numbers the README and the package documentation state.
	if DefaultDecisionTimeout != 250*time.Millisecond || DefaultSettleTimeout != 2*time.Second || DefaultHeaders != HeadersIETF|HeadersOpenAI {
		t.Errorf("defaults %v, %v, %#x; the docs say 250ms, 2s and IETF|OpenAI", DefaultDecisionTimeout, DefaultSettleTimeout, uint8(DefaultHeaders))
	}
	decision := func(c config) any { return c.decisionTimeout }
	settle := func(c config) any { return c.settleTimeout }
	headers := func(c config) any { return c.headers }
	funcOf := func(f any) any { return reflect.ValueOf(f).Pointer() }
	onRefusal := func(c config) any { return funcOf(c.onRefusal) }
	onError := func(c config) any { return funcOf(c.onError) }
	observer := func(c config) any { return c.observer }
	ptr := func(l *slog.Logger) any { return fmt.Sprintf("%p", l) }
	logger := func(c config) any { return ptr(c.logger) }
	afterHeader := func(c config) any { return c.afterHeader }

	myRefusal := RefusalHandler(func(http.ResponseWriter, *http.Request, *Refusal) {})
	myError := ErrorHandler(func(http.ResponseWriter, *http.Request, error) {})
	myObserver := &countingObserver{}
	myLogger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var unset Option

	for _, c := range []struct {
		name    string
		opts    []Option
		get     func(config) any
		want    any    // when New takes the options
		invalid string // else the Field of its *ratelimit.ValidationError
	}{
		// "(default DefaultDecisionTimeout) ... A d that is not positive
		// makes New fail with a *ratelimit.ValidationError on
		// "WithDecisionTimeout"."
		{name: "WithDecisionTimeout none", get: decision, want: DefaultDecisionTimeout},
		{name: "WithDecisionTimeout(1ns)", opts: []Option{WithDecisionTimeout(1)}, get: decision, want: time.Duration(1)},
		{name: "WithDecisionTimeout(2s)", opts: []Option{WithDecisionTimeout(2 * time.Second)}, get: decision, want: 2 * time.Second},
		{name: "WithDecisionTimeout(MaxInt64)", opts: []Option{WithDecisionTimeout(maxDur)}, get: decision, want: maxDur},
		{name: "WithDecisionTimeout(0)", opts: []Option{WithDecisionTimeout(0)}, invalid: "WithDecisionTimeout"},
		{name: "WithDecisionTimeout(-1ns)", opts: []Option{WithDecisionTimeout(-1)}, invalid: "WithDecisionTimeout"},
		{name: "WithDecisionTimeout(MinInt64)", opts: []Option{WithDecisionTimeout(minDur)}, invalid: "WithDecisionTimeout"},
		// The last one given wins, as for every option.
		{name: "WithDecisionTimeout(1s, 0)", opts: []Option{WithDecisionTimeout(time.Second), WithDecisionTimeout(0)}, invalid: "WithDecisionTimeout"},
		{name: "WithDecisionTimeout(0, 1s)", opts: []Option{WithDecisionTimeout(0), WithDecisionTimeout(time.Second)}, get: decision, want: time.Second},

		// "(default DefaultSettleTimeout) ... A d that is not positive makes
		// New fail with a *ratelimit.ValidationError on "WithSettleTimeout"."
		{name: "WithSettleTimeout none", get: settle, want: DefaultSettleTimeout},
		{name: "WithSettleTimeout(1ns)", opts: []Option{WithSettleTimeout(1)}, get: settle, want: time.Duration(1)},
		{name: "WithSettleTimeout(MaxInt64)", opts: []Option{WithSettleTimeout(maxDur)}, get: settle, want: maxDur},
		{name: "WithSettleTimeout(0)", opts: []Option{WithSettleTimeout(0)}, invalid: "WithSettleTimeout"},
		{name: "WithSettleTimeout(-1ns)", opts: []Option{WithSettleTimeout(-1)}, invalid: "WithSettleTimeout"},
		{name: "WithSettleTimeout(MinInt64)", opts: []Option{WithSettleTimeout(minDur)}, invalid: "WithSettleTimeout"},

		// "(default DefaultHeaders); 0 sends none"; New's doc: "unknown
		// header families ... is a *ratelimit.ValidationError".
		{name: "WithHeaders none", get: headers, want: DefaultHeaders},
		{name: "WithHeaders(0)", opts: []Option{WithHeaders(0)}, get: headers, want: HeaderFamily(0)},
		{name: "WithHeaders(IETF)", opts: []Option{WithHeaders(HeadersIETF)}, get: headers, want: HeadersIETF},
		{name: "WithHeaders(OpenAI)", opts: []Option{WithHeaders(HeadersOpenAI)}, get: headers, want: HeadersOpenAI},
		{name: "WithHeaders(Anthropic)", opts: []Option{WithHeaders(HeadersAnthropic)}, get: headers, want: HeadersAnthropic},
		{name: "WithHeaders(all)", opts: []Option{WithHeaders(HeadersIETF | HeadersOpenAI | HeadersAnthropic)}, get: headers, want: HeadersIETF | HeadersOpenAI | HeadersAnthropic},
		{name: "WithHeaders(IETF, 0)", opts: []Option{WithHeaders(HeadersIETF), WithHeaders(0)}, get: headers, want: HeaderFamily(0)},
		{name: "WithHeaders(0x08)", opts: []Option{WithHeaders(0x08)}, invalid: "WithHeaders"},
		{name: "WithHeaders(0x80)", opts: []Option{WithHeaders(0x80)}, invalid: "WithHeaders"},
		{name: "WithHeaders(IETF|0x10)", opts: []Option{WithHeaders(HeadersIETF | 0x10)}, invalid: "WithHeaders"},
		{name: "WithHeaders(0xff)", opts: []Option{WithHeaders(0xff)}, invalid: "WithHeaders"},

		// "replaces the default 429 response (DefaultRefusalHandler)", "the
		// default error responses (DefaultErrorHandler)"; New's doc: "a nil
		// handler or observer is a *ratelimit.ValidationError".
		{name: "WithRefusalHandler none", get: onRefusal, want: funcOf(DefaultRefusalHandler)},
		{name: "WithRefusalHandler(mine)", opts: []Option{WithRefusalHandler(myRefusal)}, get: onRefusal, want: funcOf(myRefusal)},
		{name: "WithRefusalHandler(nil)", opts: []Option{WithRefusalHandler(nil)}, invalid: "WithRefusalHandler"},
		{name: "WithErrorHandler none", get: onError, want: funcOf(DefaultErrorHandler)},
		{name: "WithErrorHandler(mine)", opts: []Option{WithErrorHandler(myError)}, get: onError, want: funcOf(myError)},
		{name: "WithErrorHandler(nil)", opts: []Option{WithErrorHandler(nil)}, invalid: "WithErrorHandler"},
		{name: "WithObserver none", get: observer, want: Observer(nopObserver{})},
		{name: "WithObserver(mine)", opts: []Option{WithObserver(myObserver)}, get: observer, want: Observer(myObserver)},
		{name: "WithObserver(nil)", opts: []Option{WithObserver(nil)}, invalid: "WithObserver"},

		// "(default false ...)"
		{name: "WithCommitAfterHeader none", get: afterHeader, want: false},
		{name: "WithCommitAfterHeader(true)", opts: []Option{WithCommitAfterHeader(true)}, get: afterHeader, want: true},
		{name: "WithCommitAfterHeader(true, false)", opts: []Option{WithCommitAfterHeader(true), WithCommitAfterHeader(false)}, get: afterHeader, want: false},

		// "(default slog.Default() as it is when New runs, which a nil l
		// also means)": TestWithLoggerDefaultIsSlogsWhenNewRuns holds the
		// "when New runs".
		{name: "WithLogger none", get: logger, want: ptr(slog.Default())},
		{name: "WithLogger(mine)", opts: []Option{WithLogger(myLogger)}, get: logger, want: ptr(myLogger)},
		{name: "WithLogger(mine, nil)", opts: []Option{WithLogger(myLogger), WithLogger(nil)}, get: logger, want: ptr(slog.Default())},

		// "a nil Option ... sets nothing"
		{name: "nil Options", opts: []Option{unset, WithDecisionTimeout(time.Second), nil}, get: decision, want: time.Second},
	} {
		m, err := newMiddleware(ratelimit.New(nil), func(*http.Request) ([]Limit, error) { return nil, nil }, c.opts)
		if c.invalid != "" {
			var invalid *ratelimit.ValidationError
			if m != nil || !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != c.invalid {
				t.Errorf("%s: New = %v, want a *ratelimit.ValidationError on %s", c.name, err, c.invalid)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: New = %v, want it to take the options", c.name, err)
			continue
		}
		if got := c.get(m.config); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if m.logger == nil {
			t.Errorf("%s: no logger", c.name)
		}
	}
}

// WithLogger's default, and a nil l, is slog.Default() as it is when New
// runs, not as it is when a request is logged. Not parallel: it sets
// slog's default logger (and so the log package's output), and puts both
// back.
func TestWithLoggerDefaultIsSlogsWhenNewRuns(t *testing.T) {
	before, w, flags := slog.Default(), log.Writer(), log.Flags()
	t.Cleanup(func() {
		slog.SetDefault(before)
		log.SetOutput(w)
		log.SetFlags(flags)
	})
	atNew := slog.New(slog.NewTextHandler(io.Discard, nil))
	slog.SetDefault(atNew)
	limits := func(*http.Request) ([]Limit, error) { return nil, nil }
	none, err := newMiddleware(ratelimit.New(nil), limits, nil)
	if err != nil {
		t.Fatal(err)
	}
	unset, err := newMiddleware(ratelimit.New(nil), limits, []Option{WithLogger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if none.logger != atNew || unset.logger != atNew {
		t.Errorf("loggers %p and %p, want slog.Default() when New ran, %p", none.logger, unset.logger, atNew)
	}
}

// What a Limit's Mode and OnFailure take: the zero Limit enforces and
// fails closed ("the default"), and "a value other than Enforce and
// Shadow" (FailClosed and FailOpen) "is refused with ErrInvalidLimit",
// the *ratelimit.ValidationError naming the field by the limit's index.
// Their String is their name, or the type and number of another value.
func TestModeAndFailurePolicyKeepTheirDocumentedValues(t *testing.T) {
	t.Parallel()
	if l := (Limit{}); l.Mode != Enforce || l.OnFailure != FailClosed {
		t.Errorf("the zero Limit: %v, %v; want enforce, fail_closed", l.Mode, l.OnFailure)
	}
	for _, c := range []struct {
		got, want string
	}{
		{Enforce.String(), "enforce"},
		{Shadow.String(), "shadow"},
		{Mode(2).String(), "Mode(2)"},
		{Mode(255).String(), "Mode(255)"},
		{FailClosed.String(), "fail_closed"},
		{FailOpen.String(), "fail_open"},
		{FailurePolicy(2).String(), "FailurePolicy(2)"},
		{FailurePolicy(255).String(), "FailurePolicy(255)"},
	} {
		if c.got != c.want {
			t.Errorf("String() = %q, want %q", c.got, c.want)
		}
	}
	ok := Limit{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: "k"}, Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1}}
	for _, c := range []struct {
		mode    Mode
		policy  FailurePolicy
		invalid string // the Field of the error, or "" for none
	}{
		{Enforce, FailClosed, ""},
		{Enforce, FailOpen, ""},
		{Shadow, FailClosed, ""},
		{Shadow, FailOpen, ""},
		{2, FailClosed, "Limits[1].Mode"},
		{255, FailOpen, "Limits[1].Mode"},
		{Shadow, 2, "Limits[1].OnFailure"},
		{Enforce, 255, "Limits[1].OnFailure"},
	} {
		l := ok
		l.Mode, l.OnFailure = c.mode, c.policy
		err := checkLimits([]Limit{ok, l})
		var invalid *ratelimit.ValidationError
		switch {
		case c.invalid == "" && err != nil:
			t.Errorf("%v, %v: %v, want no error", c.mode, c.policy, err)
		case c.invalid != "" && (!errors.Is(err, ErrInvalidLimit) || !errors.As(err, &invalid) || invalid.Field != c.invalid):
			t.Errorf("%v, %v: %v, want ErrInvalidLimit on %s", c.mode, c.policy, err, c.invalid)
		}
	}
}

// countingObserver is an Observer of its own type, told apart from
// nopObserver.
type countingObserver struct{ decided int }

func (o *countingObserver) Decided([]LimitOutcome)                    { o.decided++ }
func (o *countingObserver) DatabaseCall(string, time.Duration, error) {}
func (o *countingObserver) LeasesHeld(int)                            {}
