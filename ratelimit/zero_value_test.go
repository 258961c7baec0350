package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/internal/errzero"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// testOnlyMethods are the Limiter's methods declared in export_test.go,
// hooks into its internals for tests, not part of its API.
var testOnlyMethods = map[string]bool{
	"ReserveCombined": true, "CommitCombined": true, "QueuedReserves": true, "QueuedSettles": true, "AllotmentSets": true,
	"LocalAdmissionsKept": true, "AfterReserveStatements": true, "DBClock": true,
	"ReservesInFlight": true, "ReleaseUnheld": true, "RetryUnheld": true, "GiveBackUnheldInBackground": true, "LockTimeoutsSet": true, "DoctorJIT": true,
	"QueueUnnoticedReserve": true, "TouchAllotmentSets": true, "ReleaseIfEndedUnread": true,
}

// callEveryMethod calls every exported method of recv (through
// reflection, so that a method added later is called too) with the
// argument of its type in args, or its type's zero value. It reports a panic as an error of the test, and checks with
// wantErr every error a method returns; a method that returns no error
// must simply not panic. It returns the names of the methods called.
func callEveryMethod(t *testing.T, name string, recv reflect.Value, args map[reflect.Type]any, wantErr func(method string, err error)) []string {
	t.Helper()
	errType := reflect.TypeFor[error]()
	var called []string
	for i := range recv.NumMethod() {
		m := recv.Type().Method(i)
		if testOnlyMethods[m.Name] {
			continue
		}
		called = append(called, m.Name)
		in := make([]reflect.Value, m.Type.NumIn()-1) // without the receiver
		for j := range in {
			typ := m.Type.In(j + 1)
			if a, ok := args[typ]; ok {
				in[j] = reflect.ValueOf(a)
			} else {
				in[j] = reflect.Zero(typ)
			}
		}
		out, panicked := func() (out []reflect.Value, panicked any) {
			defer func() { panicked = recover() }()
			return recv.Method(i).Call(in), nil
		}()
		if panicked != nil {
			t.Errorf("%s.%s panicked: %v", name, m.Name, panicked)
			continue
		}
		for _, o := range out {
			if o.Type() == errType {
				err, _ := o.Interface().(error)
				wantErr(name+"."+m.Name, err)
			}
		}
	}
	return called
}

// A Limiter or a Maintenance that was not made with New or NewMaintenance
// (a zero value, or a nil pointer) fails every operation with a
// *ValidationError naming it, and writes nothing; Stats, Close and WithTx
// do not panic, and a Limiter that WithTx returns from one fails likewise
// (even on a live transaction). They used to panic on their nil fields
// (the connection, the hot counters), and WithTx of a zero Limiter wrote
// through the transaction.
func TestZeroValuesFailWithValidationError(t *testing.T) {
	t.Parallel()
	_, pool := setup(t)
	ctx := context.Background()
	before := rowCounts(t, pool)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()

	wantField := func(field string) func(string, error) {
		return func(method string, err error) {
			t.Helper()
			var invalid *ratelimit.ValidationError
			if !errors.Is(err, ratelimit.ErrInvalidInput) || !errors.As(err, &invalid) || invalid.Field != field {
				t.Errorf("%s: err = %v, want a *ValidationError on %s", method, err, field)
			}
		}
	}
	// WithTx is called on the receiver itself, so that a panic in it is
	// reported as one.
	withTx := func(l *ratelimit.Limiter) (got *ratelimit.Limiter, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("WithTx panicked: %v", p)
			}
		}()
		return l.WithTx(tx), nil
	}
	limiters := map[string]*ratelimit.Limiter{"Limiter{}": {}, "(*Limiter)(nil)": nil}
	for _, name := range []string{"Limiter{}", "(*Limiter)(nil)"} {
		inTx, err := withTx(limiters[name])
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		limiters[name+".WithTx(tx)"] = inTx
	}
	// Arguments that pass validation, so that an operation goes as far as
	// it can, and zero values, which do not: the receiver is refused first.
	valid := validArguments(uniqueKey("zerovalue"))
	valid[reflect.TypeFor[context.Context]()] = ctx
	valid[reflect.TypeFor[pgx.Tx]()] = tx
	argSets := map[string]map[reflect.Type]any{
		"zero arguments": {
			reflect.TypeFor[context.Context](): ctx,
			reflect.TypeFor[pgx.Tx]():          tx,
		},
		"valid arguments": valid,
	}
	var methods []string
	for argsName, args := range argSets {
		for name, l := range limiters {
			methods = callEveryMethod(t, name+" ("+argsName+")", reflect.ValueOf(l), args, wantField("Limiter"))
		}
		for name, m := range map[string]*ratelimit.Maintenance{"Maintenance{}": {}, "(*Maintenance)(nil)": nil} {
			methods := callEveryMethod(t, name+" ("+argsName+")", reflect.ValueOf(m), args, wantField("Maintenance"))
			if !cmp.Equal(methods, []string{"Doctor", "Prune", "Recover"}) {
				t.Errorf("%s: called %v, want Doctor, Prune and Recover", name, methods)
			}
		}
	}
	// The API, as of this test: the method set is walked by reflection, this
	// only shows that it was.
	for _, m := range []string{"Attach", "Check", "ClaimTask", "Close", "Commit", "CreateTask", "FinishTask", "Reserve", "Stats", "WithTx"} {
		if !slices.Contains(methods, m) {
			t.Errorf("Limiter.%s not called (called %v)", m, methods)
		}
	}

	// What the transaction did (nothing, if the Limiters of WithTx refused
	// every operation) is committed, and counted with the rest.
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if diff := cmp.Diff(before, rowCounts(t, pool)); diff != "" {
		t.Errorf("rows written (-before +after):\n%s", diff)
	}
}

// validArguments are, by type, arguments of the exported methods that
// pass validation, on limits of key: called with them, an operation goes
// as far as its receiver and context let it. Neither a context nor a
// transaction is among them.
func validArguments(key string) map[reflect.Type]any {
	const id = "123e4567-e89b-12d3-a456-426614174000"
	local := window("model", key, ratelimit.MetricTokens, 1000, 1)
	local.Local = true
	leases := []ratelimit.Lease{{ID: id}}
	return map[reflect.Type]any{
		reflect.TypeFor[string]():        id, // a task, attempt or worker id, a reason
		reflect.TypeFor[time.Duration](): time.Minute,
		reflect.TypeFor[[]ratelimit.Limit](): []ratelimit.Limit{
			window("api_key", key, "requests", 10, 1), concurrent("model", key, 2), local,
		},
		reflect.TypeFor[ratelimit.Grant](): ratelimit.Grant{
			Reservations: []ratelimit.Reservation{{ID: id, Amount: 1}}, Leases: leases,
		},
		reflect.TypeFor[[]ratelimit.Lease]():  leases,
		reflect.TypeFor[ratelimit.TaskSpec](): ratelimit.TaskSpec{Kind: "test", Worker: "w"},
		reflect.TypeFor[ratelimit.Event]():    ratelimit.Event{Type: "x"},
		reflect.TypeFor[ratelimit.Outcome]():  ratelimit.Outcome{Status: ratelimit.TaskSucceeded},
	}
}

// An error made by hand, the zero value of each exported error type or one
// without the error it wraps, says something in Error, without "<nil>" or
// an empty part, and neither Error, Unwrap, errors.Is nor errors.As panics
// on it: a StepError without Err panicked in Error, and most zero values
// printed "<nil>" or empty fields ("cancel task : not queued (status )").
// Every exported error type has its zero value here (errzero.Covers reads
// them from the source).
func TestZeroErrorsDoNotPanic(t *testing.T) {
	t.Parallel()
	step := &ratelimit.StepError{}
	namedStep := &ratelimit.StepError{Job: "prune", Step: "allotments", NotRun: []string{"events"}}
	cases := []errzero.Case{
		{Name: "ValidationError{}", Err: &ratelimit.ValidationError{}, Is: []error{ratelimit.ErrInvalidInput}},
		{Name: "ExceededError{}", Err: &ratelimit.ExceededError{}, Is: []error{ratelimit.ErrExceeded}},
		{Name: "LeaseLostError{}", Err: &ratelimit.LeaseLostError{}, Is: []error{ratelimit.ErrLeaseLost}},
		{Name: "LockWaitError{}", Err: &ratelimit.LockWaitError{}},
		{Name: "LockWaitError without Err", Err: &ratelimit.LockWaitError{Job: "recover", Step: "take the recover lease"}},
		{Name: "StepError{}", Err: step},
		{Name: "StepError without Err", Err: namedStep},
		{Name: "StepError of a LockWaitError{}", Err: &ratelimit.StepError{Err: &ratelimit.LockWaitError{}}},
		{Name: "LockOrderError{}", Err: &ratelimit.LockOrderError{}, Is: []error{ratelimit.ErrLockOrder}},
		{Name: "PoolerError{}", Err: &ratelimit.PoolerError{}, Is: []error{ratelimit.ErrPoolerMismatch}},
		{Name: "PoolerError of statement pooling without Cause", Err: &ratelimit.PoolerError{StatementPooling: true},
			Is: []error{ratelimit.ErrPoolerMismatch, ratelimit.ErrStatementPooling}},
		{Name: "TaskNotQueuedError{}", Err: &ratelimit.TaskNotQueuedError{}, Is: []error{ratelimit.ErrTaskNotQueued}},
		{Name: "StaleTokenError{}", Err: &ratelimit.StaleTokenError{}, Is: []error{ratelimit.ErrStaleToken}},
	}
	errzero.Check(t, cases)
	errzero.Covers(t, ".", cases)
	// One made by hand says what it names, and leaves out what it lacks.
	for err, want := range map[error]string{
		step:                         "ratelimit: step failed",
		namedStep:                    "ratelimit: prune: allotments: step failed",
		&ratelimit.ValidationError{}: "ratelimit: invalid value",
		&ratelimit.ValidationError{Field: "Limits", Value: 3}:                    "ratelimit: invalid Limits (3)",
		&ratelimit.LeaseLostError{}:                                              "ratelimit: concurrency lease lost",
		&ratelimit.LeaseLostError{Renewed: 2}:                                    "ratelimit: concurrency lease lost; renewed 2",
		&ratelimit.LockWaitError{}:                                               "ratelimit: left the rest of the step: another transaction held a lock past the lock timeout",
		&ratelimit.LockWaitError{Job: "recover", Step: "take the recover lease"}: "ratelimit: recover: take the recover lease: the run did nothing: another transaction held a lock past the lock timeout",
		&ratelimit.LockOrderError{}: "ratelimit: an operation after an earlier operation in the same transaction could deadlock with other transactions " +
			"(locks are taken counters, then concurrency scopes, then queue scopes, then rows): run it in its own transaction or before an earlier operation",
		&ratelimit.TaskNotQueuedError{}:              "ratelimit: cancel task: not queued",
		&ratelimit.TaskNotQueuedError{TaskID: "t1"}:  "ratelimit: cancel task t1: not queued",
		&ratelimit.StaleTokenError{}:                 "ratelimit: stale execution token",
		&ratelimit.StaleTokenError{Status: "queued"}: "ratelimit: stale execution token (status queued)",
	} {
		if got := err.Error(); got != want {
			t.Errorf("Error() = %q, want %q", got, want)
		}
	}
}
