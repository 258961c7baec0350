package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Every exported operation of a Limiter and a Maintenance, given bad
// input on a database holding live state (an open grant with a
// reservation and a lease, a running sync task, a queued async task),
// returns a *ValidationError naming the field (errors.Is ErrInvalidInput),
// whose message is one short line of valid UTF-8 showing text quoted,
// without panicking; and
// nothing in the database moves: row counts, the counters' sums, the
// grant's lease rows, the running task's execution lease.
func TestBadInputSweepWritesNothing(t *testing.T) {
	t.Parallel()
	l, pool := setup(t)
	defer l.Close()
	m := ratelimit.NewMaintenance(pool)
	ctx := context.Background()
	key := uniqueKey("sweep")
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 100, 10), concurrent("model", key, 5)})
	if err != nil {
		t.Fatal(err)
	}
	running := startSync(t, l, time.Hour)
	queued := createAsync(t, l)
	leaseRows := func() []dbtest.LeaseRowsByScopeRow {
		rows, err := testq.LeaseRowsByScope(ctx, pool, dbtest.LeaseRowsByScopeParams{ScopeType: "model", ScopeKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	type state struct {
		Counts  dbtest.TableRowCountsRow
		Summary dbtest.OpsStateSummaryRow
		Leases  []dbtest.LeaseRowsByScopeRow
		Running ratelimit.Task
		Queued  ratelimit.Task
	}
	snapshot := func() state {
		return state{rowCounts(t, pool), summary(t, pool), leaseRows(), getTask(t, l, running.ID), getTask(t, l, queued.ID)}
	}
	before := snapshot()

	const id = "123e4567-e89b-12d3-a456-426614174000"
	nan, inf := math.NaN(), math.Inf(1)
	long := strings.Repeat("k", ratelimit.MaxScopeBytes+1)
	lim := func(edit func(*ratelimit.Limit)) []ratelimit.Limit {
		x := window("api_key", key, "tokens", 100, 1)
		edit(&x)
		return []ratelimit.Limit{x}
	}
	conc := func(edit func(*ratelimit.Limit)) []ratelimit.Limit {
		x := concurrent("model", key, 5)
		edit(&x)
		return []ratelimit.Limit{x}
	}
	withRes := func(edit func(*ratelimit.Reservation)) ratelimit.Grant {
		g := grant
		g.Reservations = slices.Clone(grant.Reservations)
		edit(&g.Reservations[0])
		return g
	}
	withLease := func(edit func(*ratelimit.Lease)) []ratelimit.Lease {
		ls := slices.Clone(grant.Leases)
		edit(&ls[0])
		return ls
	}
	reserve := func(limits []ratelimit.Limit) func() error {
		return func() error { _, err := l.Reserve(ctx, "", "", limits); return err }
	}
	check := func(limits []ratelimit.Limit) func() error {
		return func() error { return l.Check(ctx, limits) }
	}
	many := make([]ratelimit.Limit, ratelimit.MaxLimitsPerCall+1)
	for i := range many {
		many[i] = window("api_key", key, "m"+strings.Repeat("x", i), 100, 1)
	}
	create := func(spec ratelimit.TaskSpec) func() error {
		return func() error { _, err := l.CreateTask(ctx, spec); return err }
	}
	q := func(edit func(*ratelimit.Limit)) []ratelimit.Limit {
		x := queueLimit(key, 3)
		edit(&x)
		return []ratelimit.Limit{x}
	}
	finish := func(out ratelimit.Outcome) func() error {
		return func() error { _, err := l.FinishTask(ctx, running.ID, running.ExecutionToken, out); return err }
	}
	event := func(e ratelimit.Event) func() error {
		return func() error { _, err := l.AppendEvent(ctx, running.ID, running.ExecutionToken, e); return err }
	}

	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		// Reserve and Check: every field of a limit.
		{"Reserve NaN amount", reserve(lim(func(x *ratelimit.Limit) { x.Amount = nan })), "Limits[0].Amount"},
		{"Reserve +Inf amount", reserve(lim(func(x *ratelimit.Limit) { x.Amount = inf })), "Limits[0].Amount"},
		{"Reserve -Inf limit", reserve(lim(func(x *ratelimit.Limit) { x.Limit = -inf })), "Limits[0].Limit"},
		{"Reserve negative amount", reserve(lim(func(x *ratelimit.Limit) { x.Amount = -1 })), "Limits[0].Amount"},
		{"Reserve negative zero is zero", nil, ""},
		{"Reserve huge amount", reserve(lim(func(x *ratelimit.Limit) { x.Amount = 1e300 })), "Limits[0].Amount"},
		{"Reserve tiny amount", reserve(lim(func(x *ratelimit.Limit) { x.Amount = 1e-300 })), "Limits[0].Amount"},
		{"Reserve subnormal limit", reserve(lim(func(x *ratelimit.Limit) { x.Limit = math.SmallestNonzeroFloat64 })), "Limits[0].Limit"},
		{"Reserve negative window", reserve(lim(func(x *ratelimit.Limit) { x.Window = -time.Second })), "Limits[0].Window"},
		{"Reserve fractional window", reserve(lim(func(x *ratelimit.Limit) { x.Window = 1500 * time.Millisecond })), "Limits[0].Window"},
		{"Reserve window past MaxWindow", reserve(lim(func(x *ratelimit.Limit) { x.Window = ratelimit.MaxWindow + time.Second })), "Limits[0].Window"},
		{"Reserve window of MaxInt64", reserve(lim(func(x *ratelimit.Limit) { x.Window = math.MaxInt64 })), "Limits[0].Window"},
		{"Reserve window of MinInt64", reserve(lim(func(x *ratelimit.Limit) { x.Window = math.MinInt64 })), "Limits[0].Window"},
		{"Reserve negative lease TTL", reserve(conc(func(x *ratelimit.Limit) { x.LeaseTTL = -time.Second })), "Limits[0].LeaseTTL"},
		{"Reserve lease TTL past MaxLeaseTTL", reserve(conc(func(x *ratelimit.Limit) { x.LeaseTTL = ratelimit.MaxLeaseTTL + time.Second })), "Limits[0].LeaseTTL"},
		{"Reserve fractional lease TTL", reserve(conc(func(x *ratelimit.Limit) { x.LeaseTTL = time.Nanosecond })), "Limits[0].LeaseTTL"},
		{"Reserve empty scope type", reserve(lim(func(x *ratelimit.Limit) { x.Scope.Type = "" })), "Limits[0].Scope.Type"},
		{"Reserve blank scope key", reserve(lim(func(x *ratelimit.Limit) { x.Scope.Key = " \t\n" })), "Limits[0].Scope.Key"},
		{"Reserve overlong scope key", reserve(lim(func(x *ratelimit.Limit) { x.Scope.Key = long })), "Limits[0].Scope.Key"},
		{"Reserve invalid UTF-8 key", reserve(lim(func(x *ratelimit.Limit) { x.Scope.Key = "k\xff" })), "Limits[0].Scope.Key"},
		{"Reserve NUL in type", reserve(lim(func(x *ratelimit.Limit) { x.Scope.Type = "a\x00b" })), "Limits[0].Scope.Type"},
		{"Reserve empty metric", reserve(lim(func(x *ratelimit.Limit) { x.Metric = "" })), "Limits[0].Metric"},
		{"Reserve overlong metric", reserve(lim(func(x *ratelimit.Limit) { x.Metric = long })), "Limits[0].Metric"},
		{"Reserve invalid UTF-8 metric", reserve(lim(func(x *ratelimit.Limit) { x.Metric = "\xc3" })), "Limits[0].Metric"},
		{"Reserve queue_size metric", reserve(lim(func(x *ratelimit.Limit) { x.Metric = ratelimit.MetricQueueSize })), "Limits[0].Metric"},
		{"Reserve Local concurrent", reserve(conc(func(x *ratelimit.Limit) { x.Local = true })), "Limits[0].Local"},
		{"Reserve duplicate limits", reserve(append(lim(func(*ratelimit.Limit) {}), lim(func(*ratelimit.Limit) {})...)), "Limits[1]"},
		{"Reserve duplicate concurrent limits of other TTLs", reserve(append(conc(func(*ratelimit.Limit) {}),
			conc(func(x *ratelimit.Limit) { x.LeaseTTL = time.Minute })...)), "Limits[1]"},
		{"Reserve duplicate with the default window spelled out", reserve(append(lim(func(*ratelimit.Limit) {}),
			lim(func(x *ratelimit.Limit) { x.Window = ratelimit.DefaultWindow })...)), "Limits[1]"},
		{"Reserve too many limits", reserve(many), "Limits"},
		{"Reserve bad limit after a good one", reserve(append(lim(func(*ratelimit.Limit) {}),
			window("api_key", key, "requests", nan, 1))), "Limits[1].Limit"},
		{"Reserve malformed task id", func() error { _, err := l.Reserve(ctx, "nope", "", nil); return err }, "TaskID"},
		{"Reserve attempt without task", func() error { _, err := l.Reserve(ctx, "", id, nil); return err }, "TaskID"},
		{"Reserve uppercase-hyphenless task id", func() error {
			_, err := l.Reserve(ctx, strings.ReplaceAll(id, "-", ""), "", nil)
			return err
		}, "TaskID"},
		{"Check NaN amount", check(lim(func(x *ratelimit.Limit) { x.Amount = nan })), "Limits[0].Amount"},
		{"Check duplicate limits", check(append(lim(func(*ratelimit.Limit) {}), lim(func(*ratelimit.Limit) {})...)), "Limits[1]"},
		{"Check too many limits", check(many), "Limits"},
		{"Check queue_size metric", check(lim(func(x *ratelimit.Limit) { x.Metric = ratelimit.MetricQueueSize })), "Limits[0].Metric"},
		{"Check bad concurrent TTL", check(conc(func(x *ratelimit.Limit) { x.LeaseTTL = -1 })), "Limits[0].LeaseTTL"},

		// Commit and Release: actual amounts, reasons, altered grants.
		{"Commit NaN actual", func() error { _, err := l.Commit(ctx, grant, map[string]float64{"tokens": nan}); return err }, `actual["tokens"]`},
		{"Commit -Inf actual", func() error { _, err := l.Commit(ctx, grant, map[string]float64{"tokens": -inf}); return err }, `actual["tokens"]`},
		{"Commit negative actual", func() error { _, err := l.Commit(ctx, grant, map[string]float64{"tokens": -1}); return err }, `actual["tokens"]`},
		{"Commit huge actual", func() error { _, err := l.Commit(ctx, grant, map[string]float64{"tokens": 1e16}); return err }, `actual["tokens"]`},
		{"Commit bad actual of another metric", func() error {
			_, err := l.Commit(ctx, grant, map[string]float64{"tokens": 1, "other": nan})
			return err
		}, `actual["other"]`},
		{"Commit NaN estimate", func() error {
			_, err := l.Commit(ctx, withRes(func(r *ratelimit.Reservation) { r.Amount = nan }), nil)
			return err
		}, "Reservations[0].Amount"},
		{"Commit negative estimate", func() error {
			_, err := l.Commit(ctx, withRes(func(r *ratelimit.Reservation) { r.Amount = -5 }), nil)
			return err
		}, "Reservations[0].Amount"},
		{"Commit malformed reservation id", func() error {
			_, err := l.Commit(ctx, withRes(func(r *ratelimit.Reservation) { r.ID = "x" }), nil)
			return err
		}, "Reservations.ID[0]"},
		{"Commit reservation named twice", func() error {
			g := grant
			g.Reservations = append(slices.Clone(grant.Reservations), grant.Reservations[0])
			_, err := l.Commit(ctx, g, nil)
			return err
		}, "Reservations.ID[1]"},
		{"Commit lease named twice in other case", func() error {
			g := grant
			dup := grant.Leases[0]
			dup.ID = strings.ToUpper(dup.ID)
			g.Leases = append(slices.Clone(grant.Leases), dup)
			_, err := l.Commit(ctx, g, nil)
			return err
		}, "Leases.ID[1]"},
		{"Commit window start out of range", func() error {
			_, err := l.Commit(ctx, withRes(func(r *ratelimit.Reservation) { r.WindowStart = time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC) }), nil)
			return err
		}, "Reservations[0].WindowStart"},
		{"Commit overlong metric", func() error {
			_, err := l.Commit(ctx, withRes(func(r *ratelimit.Reservation) { r.Metric = long }), nil)
			return err
		}, "Reservations[0].Metric"},
		{"Release invalid UTF-8 reason", func() error { _, err := l.Release(ctx, grant, "r\xff"); return err }, "reason"},
		{"Release NUL in reason", func() error { _, err := l.Release(ctx, grant, "r\x00"); return err }, "reason"},
		{"Release overlong reason", func() error {
			_, err := l.Release(ctx, grant, strings.Repeat("r", ratelimit.MaxReasonBytes+1))
			return err
		}, "reason"},
		{"Release malformed lease id", func() error {
			g := grant
			g.Leases = withLease(func(x *ratelimit.Lease) { x.ID = id[:35] + "g" })
			_, err := l.Release(ctx, g, "")
			return err
		}, "Leases.ID[0]"},
		{"Release malformed task id of the grant is not sent", nil, ""},

		// Leases.
		{"RenewLeases negative TTL", func() error {
			_, err := l.RenewLeases(ctx, withLease(func(x *ratelimit.Lease) { x.TTL = -time.Second }))
			return err
		}, "Leases.TTL[0]"},
		{"RenewLeases TTL past MaxLeaseTTL", func() error {
			_, err := l.RenewLeases(ctx, withLease(func(x *ratelimit.Lease) { x.TTL = math.MaxInt64 }))
			return err
		}, "Leases.TTL[0]"},
		{"RenewLeases fractional TTL", func() error {
			_, err := l.RenewLeases(ctx, withLease(func(x *ratelimit.Lease) { x.TTL = time.Millisecond }))
			return err
		}, "Leases.TTL[0]"},
		{"RenewLeases lease twice", func() error {
			_, err := l.RenewLeases(ctx, append(slices.Clone(grant.Leases), grant.Leases...))
			return err
		}, "Leases.ID[1]"},
		{"RenewLeases malformed id", func() error {
			_, err := l.RenewLeases(ctx, withLease(func(x *ratelimit.Lease) { x.ID = "" }))
			return err
		}, "Leases.ID[0]"},
		{"ReleaseLeases bad reason", func() error { _, err := l.ReleaseLeases(ctx, grant.Leases, "\x00"); return err }, "reason"},
		{"ReleaseLeases lease twice", func() error {
			_, err := l.ReleaseLeases(ctx, append(slices.Clone(grant.Leases), grant.Leases...), "")
			return err
		}, "Leases.ID[1]"},
		{"Attach malformed attempt", func() error { _, err := l.Attach(ctx, "", grant); return err }, "AttemptID"},
		{"Attach malformed grant task id", func() error {
			g := grant
			g.TaskID = "nope"
			_, err := l.Attach(ctx, running.AttemptID, g)
			return err
		}, "TaskID"},
		{"Attach reservation named twice", func() error {
			g := grant
			g.Reservations = append(slices.Clone(grant.Reservations), grant.Reservations...)
			_, err := l.Attach(ctx, running.AttemptID, g)
			return err
		}, "Reservations.ID[1]"},

		// Tasks.
		{"CreateTask sync without worker", create(ratelimit.TaskSpec{}), "Worker"},
		{"CreateTask async with worker", create(ratelimit.TaskSpec{Async: true, Worker: "w"}), "Worker"},
		{"CreateTask async with lease TTL", create(ratelimit.TaskSpec{Async: true, LeaseTTL: time.Minute}), "LeaseTTL"},
		{"CreateTask negative lease TTL", create(ratelimit.TaskSpec{Worker: "w", LeaseTTL: -time.Second}), "LeaseTTL"},
		{"CreateTask lease TTL past MaxLeaseTTL", create(ratelimit.TaskSpec{Worker: "w", LeaseTTL: ratelimit.MaxLeaseTTL + time.Second}), "LeaseTTL"},
		{"CreateTask invalid JSON payload", create(ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`{"a":`)}), "Payload"},
		{"CreateTask NUL escape in payload", create(ratelimit.TaskSpec{Async: true, Payload: json.RawMessage(`{"a":"\u0000"}`)}), "Payload"},
		{"CreateTask invalid UTF-8 kind", create(ratelimit.TaskSpec{Async: true, Kind: "\xff"}), "Kind"},
		{"CreateTask queue NaN limit", create(ratelimit.TaskSpec{Async: true, QueueLimits: q(func(x *ratelimit.Limit) { x.Limit = nan })}), "QueueLimits[0].Limit"},
		{"CreateTask queue fractional limit", create(ratelimit.TaskSpec{Async: true, QueueLimits: q(func(x *ratelimit.Limit) { x.Limit = 2.5 })}), "QueueLimits[0].Limit"},
		{"CreateTask queue amount 2", create(ratelimit.TaskSpec{Async: true, QueueLimits: q(func(x *ratelimit.Limit) { x.Amount = 2 })}), "QueueLimits[0].Amount"},
		{"CreateTask queue window", create(ratelimit.TaskSpec{Async: true, QueueLimits: q(func(x *ratelimit.Limit) { x.Window = time.Minute })}), "QueueLimits[0].Window"},
		{"CreateTask queue Local", create(ratelimit.TaskSpec{Async: true, QueueLimits: q(func(x *ratelimit.Limit) { x.Local = true })}), "QueueLimits[0].Local"},
		{"CreateTask queue metric tokens", create(ratelimit.TaskSpec{Async: true, QueueLimits: q(func(x *ratelimit.Limit) { x.Metric = "tokens" })}), "QueueLimits[0].Metric"},
		{"CreateTask queue blank key", create(ratelimit.TaskSpec{Async: true, QueueLimits: q(func(x *ratelimit.Limit) { x.Scope.Key = "" })}), "QueueLimits[0].Scope.Key"},
		{"CreateTask queue duplicate", create(ratelimit.TaskSpec{Async: true, QueueLimits: append(q(func(*ratelimit.Limit) {}), q(func(*ratelimit.Limit) {})...)}), "QueueLimits[1]"},
		{"ClaimTask blank worker", func() error { _, err := l.ClaimTask(ctx, "", 0); return err }, "workerID"},
		{"ClaimTask negative TTL", func() error { _, err := l.ClaimTask(ctx, "w", -time.Second); return err }, "leaseTTL"},
		{"ClaimTask TTL past MaxLeaseTTL", func() error { _, err := l.ClaimTask(ctx, "w", math.MaxInt64); return err }, "leaseTTL"},
		{"HeartbeatTask negative TTL", func() error {
			_, err := l.HeartbeatTask(ctx, running.ID, running.ExecutionToken, -time.Second)
			return err
		}, "ttl"},
		{"HeartbeatTask fractional TTL", func() error {
			_, err := l.HeartbeatTask(ctx, running.ID, running.ExecutionToken, 1500*time.Millisecond)
			return err
		}, "ttl"},
		{"HeartbeatTask malformed token", func() error { _, err := l.HeartbeatTask(ctx, running.ID, "t", 0); return err }, "token"},
		{"HeartbeatTask malformed task", func() error { _, err := l.HeartbeatTask(ctx, "t", running.ExecutionToken, 0); return err }, "taskID"},
		{"FinishTask unknown status", finish(ratelimit.Outcome{Status: "done"}), "Outcome.Status"},
		{"FinishTask running status", finish(ratelimit.Outcome{Status: ratelimit.TaskRunning}), "Outcome.Status"},
		{"FinishTask invalid error JSON", finish(ratelimit.Outcome{Status: ratelimit.TaskFailed, Error: json.RawMessage("{")}), "Outcome.Error"},
		{"FinishTask invalid UTF-8 message", finish(ratelimit.Outcome{Status: ratelimit.TaskFailed, ErrorMessage: "\xff"}), "Outcome.ErrorMessage"},
		{"FinishTask malformed token", func() error {
			_, err := l.FinishTask(ctx, running.ID, "", ratelimit.Outcome{Status: ratelimit.TaskSucceeded})
			return err
		}, "token"},
		{"AppendEvent empty type", event(ratelimit.Event{}), "Event.Type"},
		{"AppendEvent NaN progress", event(ratelimit.Event{Type: "x", Progress: nan}), "Event.Progress"},
		{"AppendEvent Inf progress", event(ratelimit.Event{Type: "x", Progress: inf}), "Event.Progress"},
		{"AppendEvent invalid payload", event(ratelimit.Event{Type: "x", Payload: json.RawMessage("nul")}), "Event.Payload"},
		{"AppendEvent NUL in message", event(ratelimit.Event{Type: "x", Message: "\x00"}), "Event.Message"},
		{"CancelTask malformed id", func() error { _, err := l.CancelTask(ctx, "", ""); return err }, "taskID"},
		{"CancelTask invalid reason", func() error { _, err := l.CancelTask(ctx, queued.ID, "\xff"); return err }, "reason"},
		{"GetTask malformed id", func() error { _, err := l.GetTask(ctx, "x"); return err }, "taskID"},
		{"TaskEvents malformed id", func() error { _, err := l.TaskEvents(ctx, ""); return err }, "taskID"},
		{"TaskAttempts malformed id", func() error { _, err := l.TaskAttempts(ctx, "{"+id+"}"); return err }, "taskID"},

		// Maintenance.
		{"Prune zero", func() error { _, err := m.Prune(ctx, 0); return err }, "olderThan"},
		{"Prune negative", func() error { _, err := m.Prune(ctx, -time.Hour); return err }, "olderThan"},
		{"Prune MinInt64", func() error { _, err := m.Prune(ctx, math.MinInt64); return err }, "olderThan"},
	}
	for _, tc := range tests {
		if tc.call == nil {
			continue
		}
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s panicked: %v", tc.name, p)
				}
			}()
			err = tc.call()
		}()
		var invalid *ratelimit.ValidationError
		if !errors.As(err, &invalid) || !errors.Is(err, ratelimit.ErrInvalidInput) || invalid.Field != tc.field {
			t.Errorf("%s: err = %v, want a *ValidationError on %s", tc.name, err, tc.field)
			continue
		}
		msg := err.Error()
		if strings.ContainsAny(msg, "\n\r\x00") || !utf8.ValidString(msg) || len(msg) > 400 {
			t.Errorf("%s: message is not one short line of valid UTF-8: %q", tc.name, msg)
		}
		// Text is shown quoted (or by its length, when too long), as
		// everywhere else: "invalid TaskID ()" reads as if no value
		// was shown at all.
		if v, ok := invalid.Value.(string); ok && !strings.HasPrefix(v, `"`) && !strings.HasSuffix(v, " bytes") {
			t.Errorf("%s: the value refused is shown as %s, want it quoted: %q", tc.name, v, msg)
		}
	}
	if diff := cmp.Diff(before, snapshot()); diff != "" {
		t.Errorf("bad input changed the database (-before +after):\n%s", diff)
	}
}
