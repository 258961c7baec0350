package ratelimit

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// What each MaintenanceOption does with the values its doc names: the
// default it leaves for zero and negative values, the bound it raises a
// small value to, the int4 it caps a large one at, and the largest and
// smallest values an int or a time.Duration holds (none panics or wraps).
// NewMaintenance, on a nil pool, applies them as on a real one.
func TestMaintenanceOptionsKeepTheirDocumentedBounds(t *testing.T) {
	t.Parallel()
	type get func(maintenanceOptions) int64
	recovery := func(o maintenanceOptions) int64 { return int64(o.recoveryBatchSize) }
	requeues := func(o maintenanceOptions) int64 { return int64(o.maxRequeues) }
	prune := func(o maintenanceOptions) int64 { return int64(o.pruneBatchSize) }
	retention := func(o maintenanceOptions) int64 { return int64(o.taskRetention) }
	leaseTTL := func(o maintenanceOptions) int64 { return int64(o.leaseTTL) }
	grace := func(o maintenanceOptions) int64 { return int64(o.lostGrace) }
	doctor := func(o maintenanceOptions) int64 { return int64(o.doctorLockTimeout) }
	lockTimeout := func(o maintenanceOptions) int64 { return int64(o.lockTimeout) }
	every := func(o maintenanceOptions) int64 { return int64(o.progressEvery) }
	report := func(Progress) {}
	const (
		maxInt   = math.MaxInt
		minInt   = math.MinInt
		maxInt32 = math.MaxInt32
		maxDur   = time.Duration(math.MaxInt64)
		minDur   = time.Duration(math.MinInt64)
	)
	for _, c := range []struct {
		name string
		opts []MaintenanceOption
		get  get
		want int64
	}{
		// "An n below 1 leaves the default; one above math.MaxInt32 is math.MaxInt32."
		{"WithRecoveryBatchSize none", nil, recovery, DefaultRecoveryBatchSize},
		{"WithRecoveryBatchSize(0)", []MaintenanceOption{WithRecoveryBatchSize(0)}, recovery, DefaultRecoveryBatchSize},
		{"WithRecoveryBatchSize(-1)", []MaintenanceOption{WithRecoveryBatchSize(-1)}, recovery, DefaultRecoveryBatchSize},
		{"WithRecoveryBatchSize(MinInt)", []MaintenanceOption{WithRecoveryBatchSize(minInt)}, recovery, DefaultRecoveryBatchSize},
		{"WithRecoveryBatchSize(1)", []MaintenanceOption{WithRecoveryBatchSize(1)}, recovery, 1},
		{"WithRecoveryBatchSize(MaxInt32)", []MaintenanceOption{WithRecoveryBatchSize(maxInt32)}, recovery, maxInt32},
		{"WithRecoveryBatchSize(MaxInt)", []MaintenanceOption{WithRecoveryBatchSize(maxInt)}, recovery, maxInt32},
		{"WithRecoveryBatchSize(7, 0)", []MaintenanceOption{WithRecoveryBatchSize(7), WithRecoveryBatchSize(0)}, recovery, 7},

		{"WithPruneBatchSize none", nil, prune, DefaultPruneBatchSize},
		{"WithPruneBatchSize(0)", []MaintenanceOption{WithPruneBatchSize(0)}, prune, DefaultPruneBatchSize},
		{"WithPruneBatchSize(-1)", []MaintenanceOption{WithPruneBatchSize(-1)}, prune, DefaultPruneBatchSize},
		{"WithPruneBatchSize(MinInt)", []MaintenanceOption{WithPruneBatchSize(minInt)}, prune, DefaultPruneBatchSize},
		{"WithPruneBatchSize(1)", []MaintenanceOption{WithPruneBatchSize(1)}, prune, 1},
		{"WithPruneBatchSize(MaxInt32)", []MaintenanceOption{WithPruneBatchSize(maxInt32)}, prune, maxInt32},
		{"WithPruneBatchSize(MaxInt)", []MaintenanceOption{WithPruneBatchSize(maxInt)}, prune, maxInt32},

		// "Zero fails it at its first expiry; a negative n leaves the
		// default, and one above math.MaxInt32 is math.MaxInt32."
		{"WithMaxRequeues none", nil, requeues, DefaultMaxRequeues},
		{"WithMaxRequeues(0)", []MaintenanceOption{WithMaxRequeues(0)}, requeues, 0},
		{"WithMaxRequeues(-1)", []MaintenanceOption{WithMaxRequeues(-1)}, requeues, DefaultMaxRequeues},
		{"WithMaxRequeues(MinInt)", []MaintenanceOption{WithMaxRequeues(minInt)}, requeues, DefaultMaxRequeues},
		{"WithMaxRequeues(3)", []MaintenanceOption{WithMaxRequeues(3)}, requeues, 3},
		{"WithMaxRequeues(MaxInt)", []MaintenanceOption{WithMaxRequeues(maxInt)}, requeues, maxInt32},

		// "A negative d keeps finished tasks forever; zero leaves the default."
		{"WithTaskRetention none", nil, retention, int64(DefaultTaskRetention)},
		{"WithTaskRetention(0)", []MaintenanceOption{WithTaskRetention(0)}, retention, int64(DefaultTaskRetention)},
		{"WithTaskRetention(-1)", []MaintenanceOption{WithTaskRetention(-1)}, retention, -1},
		{"WithTaskRetention(MinInt64)", []MaintenanceOption{WithTaskRetention(minDur)}, retention, int64(minDur)},
		{"WithTaskRetention(1ns)", []MaintenanceOption{WithTaskRetention(1)}, retention, 1},
		{"WithTaskRetention(MaxInt64)", []MaintenanceOption{WithTaskRetention(maxDur)}, retention, int64(maxDur)},

		// "A d under one second is one second ...; zero or negative leaves the default."
		{"WithMaintenanceLeaseTTL none", nil, leaseTTL, int64(DefaultMaintenanceLeaseTTL)},
		{"WithMaintenanceLeaseTTL(0)", []MaintenanceOption{WithMaintenanceLeaseTTL(0)}, leaseTTL, int64(DefaultMaintenanceLeaseTTL)},
		{"WithMaintenanceLeaseTTL(-1)", []MaintenanceOption{WithMaintenanceLeaseTTL(-1)}, leaseTTL, int64(DefaultMaintenanceLeaseTTL)},
		{"WithMaintenanceLeaseTTL(MinInt64)", []MaintenanceOption{WithMaintenanceLeaseTTL(minDur)}, leaseTTL, int64(DefaultMaintenanceLeaseTTL)},
		{"WithMaintenanceLeaseTTL(1ns)", []MaintenanceOption{WithMaintenanceLeaseTTL(1)}, leaseTTL, int64(time.Second)},
		{"WithMaintenanceLeaseTTL(999ms)", []MaintenanceOption{WithMaintenanceLeaseTTL(999 * time.Millisecond)}, leaseTTL, int64(time.Second)},
		{"WithMaintenanceLeaseTTL(1500ms)", []MaintenanceOption{WithMaintenanceLeaseTTL(1500 * time.Millisecond)}, leaseTTL, int64(1500 * time.Millisecond)},
		{"WithMaintenanceLeaseTTL(MaxInt64)", []MaintenanceOption{WithMaintenanceLeaseTTL(maxDur)}, leaseTTL, int64(maxDur)},

		// "A d under MinLostAllotmentGrace, 2 s, is MinLostAllotmentGrace ...
		// Zero or negative leaves the default."
		{"WithLostAllotmentGrace none", nil, grace, int64(DefaultLostAllotmentGrace)},
		{"WithLostAllotmentGrace(0)", []MaintenanceOption{WithLostAllotmentGrace(0)}, grace, int64(DefaultLostAllotmentGrace)},
		{"WithLostAllotmentGrace(-1)", []MaintenanceOption{WithLostAllotmentGrace(-1)}, grace, int64(DefaultLostAllotmentGrace)},
		{"WithLostAllotmentGrace(MinInt64)", []MaintenanceOption{WithLostAllotmentGrace(minDur)}, grace, int64(DefaultLostAllotmentGrace)},
		{"WithLostAllotmentGrace(1ns)", []MaintenanceOption{WithLostAllotmentGrace(1)}, grace, int64(MinLostAllotmentGrace)},
		{"WithLostAllotmentGrace(3s)", []MaintenanceOption{WithLostAllotmentGrace(3 * time.Second)}, grace, int64(3 * time.Second)},
		{"WithLostAllotmentGrace(MaxInt64)", []MaintenanceOption{WithLostAllotmentGrace(maxDur)}, grace, int64(maxDur)},

		// "Default 0: no bound ...; zero or negative sets nothing" (an
		// earlier bound stays).
		{"WithDoctorLockTimeout none", nil, doctor, 0},
		{"WithDoctorLockTimeout(-1)", []MaintenanceOption{WithDoctorLockTimeout(-1)}, doctor, 0},
		{"WithDoctorLockTimeout(3s, 0)", []MaintenanceOption{WithDoctorLockTimeout(3 * time.Second), WithDoctorLockTimeout(0)}, doctor, int64(3 * time.Second)},
		{"WithDoctorLockTimeout(3s, MinInt64)", []MaintenanceOption{WithDoctorLockTimeout(3 * time.Second), WithDoctorLockTimeout(minDur)}, doctor, int64(3 * time.Second)},
		{"WithDoctorLockTimeout(MaxInt64)", []MaintenanceOption{WithDoctorLockTimeout(maxDur)}, doctor, int64(maxDur)},
		{"WithMaintenanceLockTimeout none", nil, lockTimeout, 0},
		{"WithMaintenanceLockTimeout(-1)", []MaintenanceOption{WithMaintenanceLockTimeout(-1)}, lockTimeout, 0},
		{"WithMaintenanceLockTimeout(3s, 0)", []MaintenanceOption{WithMaintenanceLockTimeout(3 * time.Second), WithMaintenanceLockTimeout(0)}, lockTimeout, int64(3 * time.Second)},
		{"WithMaintenanceLockTimeout(3s, MinInt64)", []MaintenanceOption{WithMaintenanceLockTimeout(3 * time.Second), WithMaintenanceLockTimeout(minDur)}, lockTimeout, int64(3 * time.Second)},
		{"WithMaintenanceLockTimeout(MaxInt64)", []MaintenanceOption{WithMaintenanceLockTimeout(maxDur)}, lockTimeout, int64(maxDur)},

		// "after every batch when every is 0 or less"
		{"WithProgress(-1s)", []MaintenanceOption{WithProgress(-time.Second, report)}, every, 0},
		{"WithProgress(MinInt64)", []MaintenanceOption{WithProgress(minDur, report)}, every, 0},
		{"WithProgress(MaxInt64)", []MaintenanceOption{WithProgress(maxDur, report)}, every, int64(maxDur)},
	} {
		m := NewMaintenance(nil, c.opts...)
		if got := c.get(m.opts); got != c.want {
			t.Errorf("%s: %d (%v), want %d (%v)", c.name, got, time.Duration(got), c.want, time.Duration(c.want))
		}
	}
	// "A nil report reports nothing": no report function at all, whatever every.
	for _, every := range []time.Duration{minDur, 0, time.Second} {
		if m := NewMaintenance(nil, WithProgress(every, nil)); m.progressOf("recover", func(*Progress) {}) != nil {
			t.Errorf("WithProgress(%v, nil) reports", every)
		}
	}
	for _, on := range []bool{true, false} {
		if m := NewMaintenance(nil, WithPruneEvents(!on), WithPruneEvents(on)); m.opts.pruneEvents != on {
			t.Errorf("WithPruneEvents(%v) last: pruneEvents %v", on, m.opts.pruneEvents)
		}
	}
	if NewMaintenance(nil).opts.pruneEvents {
		t.Error("pruneEvents on by default, want off (default false)")
	}
}

// Doctor's lock bound is WithDoctorLockTimeout's, whatever the order of
// the options, else WithMaintenanceLockTimeout's; a zero or negative
// WithDoctorLockTimeout sets nothing, so Doctor keeps the other's. It is
// rounded up to a whole millisecond.
func TestDoctorLockBoundIsItsOwnElseMaintenances(t *testing.T) {
	t.Parallel()
	millis := func(opts ...MaintenanceOption) int64 {
		switch c := NewMaintenance(nil, opts...).doctorConn().(type) {
		case lockBounded:
			return c.millis
		case lockBoundedTx:
			return c.millis
		default:
			t.Fatalf("doctorConn() is a %T", c)
			return 0
		}
	}
	for _, c := range []struct {
		name string
		opts []MaintenanceOption
		want int64
	}{
		{"none", nil, 0},
		{"maintenance's", []MaintenanceOption{WithMaintenanceLockTimeout(2 * time.Second)}, 2000},
		{"doctor's", []MaintenanceOption{WithDoctorLockTimeout(1500 * time.Microsecond)}, 2},
		{"doctor's first", []MaintenanceOption{WithDoctorLockTimeout(time.Hour), WithMaintenanceLockTimeout(2 * time.Second)}, 3600000},
		{"maintenance's first", []MaintenanceOption{WithMaintenanceLockTimeout(2 * time.Second), WithDoctorLockTimeout(time.Hour)}, 3600000},
		{"doctor's zero", []MaintenanceOption{WithMaintenanceLockTimeout(2 * time.Second), WithDoctorLockTimeout(0)}, 2000},
		{"doctor's negative", []MaintenanceOption{WithDoctorLockTimeout(-time.Hour), WithMaintenanceLockTimeout(2 * time.Second)}, 2000},
	} {
		if got := millis(c.opts...); got != c.want {
			t.Errorf("%s: Doctor's lock_timeout %dms, want %dms", c.name, got, c.want)
		}
	}
}

// What WithCombining, WithoutCombining and WithAdvisoryLockPrefix set:
// "Values below 1 mean 1, and a maxBatch above math.MaxInt32 is
// math.MaxInt32"; the last of the options given wins.
func TestLimiterOptionsKeepTheirDocumentedBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name                string
		opts                []Option
		batch, inFlight     int
		combined            bool // New made combiners
		combinerBatch, fill int  // the combiners' own, when combined
	}{
		{"none", nil, DefaultCombineBatch, DefaultCombineInFlight, true, DefaultCombineBatch, DefaultCombineInFlight},
		{"(0, 0)", []Option{WithCombining(0, 0)}, 1, 1, true, 1, 1},
		{"(-1, -1)", []Option{WithCombining(-1, -1)}, 1, 1, true, 1, 1},
		{"(MinInt, MinInt)", []Option{WithCombining(math.MinInt, math.MinInt)}, 1, 1, true, 1, 1},
		{"(8, 2)", []Option{WithCombining(8, 2)}, 8, 2, true, 8, 2},
		{"(MaxInt32, 3)", []Option{WithCombining(math.MaxInt32, 3)}, math.MaxInt32, 3, true, math.MaxInt32, 3},
		{"(MaxInt, MaxInt)", []Option{WithCombining(math.MaxInt, math.MaxInt)}, math.MaxInt32, math.MaxInt, true, math.MaxInt32, math.MaxInt},
		{"without", []Option{WithoutCombining()}, 0, DefaultCombineInFlight, false, 0, 0},
		{"without, then (8, 2)", []Option{WithoutCombining(), WithCombining(8, 2)}, 8, 2, true, 8, 2},
		{"(8, 2), then without", []Option{WithCombining(8, 2), WithoutCombining()}, 0, 2, false, 0, 0},
	} {
		l := New(nil, c.opts...)
		if l.opts.combineBatch != c.batch || l.opts.combineInFlight != c.inFlight {
			t.Errorf("%s: combining (%d, %d), want (%d, %d)", c.name, l.opts.combineBatch, l.opts.combineInFlight, c.batch, c.inFlight)
		}
		if (l.reserves != nil) != c.combined || (l.settles != nil) != c.combined {
			t.Errorf("%s: combiners made %v, %v; want %v", c.name, l.reserves != nil, l.settles != nil, c.combined)
		} else if c.combined {
			for _, got := range [][2]int{{l.reserves.maxBatch, l.reserves.maxInFlight}, {l.settles.maxBatch, l.settles.maxInFlight}} {
				if got != [2]int{c.combinerBatch, c.fill} {
					t.Errorf("%s: a combiner of %v, want (%d, %d)", c.name, got, c.combinerBatch, c.fill)
				}
			}
		}
		l.Close()
	}
	for _, prefix := range []int32{0, 1, -1, math.MinInt32, math.MaxInt32} {
		if l := New(nil, WithAdvisoryLockPrefix(prefix)); l.opts.lockPrefix != prefix {
			t.Errorf("WithAdvisoryLockPrefix(%d) sets %d", prefix, l.opts.lockPrefix)
		}
	}
	if l := New(nil); l.opts.lockPrefix != 0 {
		t.Errorf("lock prefix %d by default, want 0", l.opts.lockPrefix)
	}
}

// AllotmentOptions: "Zero fields take their defaults, and so do a negative
// Horizon, IdleAfter or Margin and a negative or NaN MaxShare; a MaxShare
// above 1 is 1." Holder text PostgreSQL cannot hold is dropped (NUL) or
// replaced (invalid UTF-8), and one longer than MaxScopeBytes is cut at a
// character's start; an empty one is host/pid/random. The Limiter's
// blocks take them so (New applies withDefaults).
func TestAllotmentOptionsKeepTheirDocumentedBounds(t *testing.T) {
	t.Parallel()
	maxDur, minDur := time.Duration(math.MaxInt64), time.Duration(math.MinInt64)
	defaults := AllotmentOptions{MaxShare: DefaultAllotmentMaxShare, Horizon: DefaultAllotmentHorizon, IdleAfter: DefaultAllotmentIdleAfter, Margin: DefaultAllotmentMargin}
	share := func(s float64) AllotmentOptions { // the defaults but MaxShare
		o := defaults
		o.MaxShare = s
		return o
	}
	for _, c := range []struct {
		in, want AllotmentOptions
	}{
		{AllotmentOptions{}, defaults},
		{AllotmentOptions{MaxShare: -1, Horizon: -1, IdleAfter: -1, Margin: -1}, defaults},
		{AllotmentOptions{MaxShare: math.Inf(-1), Horizon: minDur, IdleAfter: minDur, Margin: minDur}, defaults},
		{AllotmentOptions{MaxShare: math.NaN(), Horizon: 1, IdleAfter: 1, Margin: 1}, AllotmentOptions{MaxShare: DefaultAllotmentMaxShare, Horizon: 1, IdleAfter: 1, Margin: 1}},
		{AllotmentOptions{MaxShare: 0.5, Horizon: maxDur, IdleAfter: maxDur, Margin: maxDur}, AllotmentOptions{MaxShare: 0.5, Horizon: maxDur, IdleAfter: maxDur, Margin: maxDur}},
		{AllotmentOptions{MaxShare: math.SmallestNonzeroFloat64}, share(math.SmallestNonzeroFloat64)},
		{AllotmentOptions{MaxShare: 1}, share(1)},
		{AllotmentOptions{MaxShare: 1 + 1e-15}, share(1)},
		{AllotmentOptions{MaxShare: math.Inf(1)}, share(1)},
	} {
		c.in.Holder, c.want.Holder = "h", "h"
		if got := New(nil, WithAllotments(c.in)).allot.opts; got != c.want {
			t.Errorf("WithAllotments(%+v): blocks sized by %+v, want %+v", c.in, got, c.want)
		}
	}
	a := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct{ name, in, want string }{
		{"NUL", "a\x00b", "ab"},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
		{"text", "gw-1", "gw-1"},
		// "at most MaxScopeBytes bytes: a longer one is cut to them, never
		// inside a character", as PostgreSQL gets it (after the NUL bytes
		// go and the U+FFFD come).
		{"MaxScopeBytes", a(MaxScopeBytes), a(MaxScopeBytes)},
		{"MaxScopeBytes+1", a(MaxScopeBytes + 1), a(MaxScopeBytes)},
		{"a megabyte", a(1 << 20), a(MaxScopeBytes)},
		{"é across the bound", a(MaxScopeBytes-1) + "é", a(MaxScopeBytes - 1)},
		{"é up to the bound", a(MaxScopeBytes-2) + "é", a(MaxScopeBytes-2) + "é"},
		{"U+FFFD across the bound", a(MaxScopeBytes-2) + "\xff", a(MaxScopeBytes - 2)},
		{"NUL past the bound", a(MaxScopeBytes) + "\x00", a(MaxScopeBytes)},
	} {
		if got := (AllotmentOptions{Holder: c.in}).withDefaults().Holder; got != c.want {
			t.Errorf("Holder %s (%d bytes) is %.60q (%d bytes), want %.60q (%d bytes)", c.name, len(c.in), got, len(got), c.want, len(c.want))
		}
	}
	for _, in := range []string{"", "\x00", "\x00\x00"} {
		got := (AllotmentOptions{Holder: in}).withDefaults().Holder
		if parts := strings.Split(got, "/"); len(parts) < 3 || parts[len(parts)-2] == "" || len(parts[len(parts)-1]) != 12 {
			t.Errorf("Holder %q is %q, want host/pid/random", in, got)
		} else if _, err := strconv.Atoi(parts[len(parts)-2]); err != nil {
			t.Errorf("Holder %q is %q, want host/pid/random", in, got)
		}
	}
}

// The TTLs and windows that zero leaves to a default: a Limit's Window
// (DefaultWindow) and LeaseTTL (DefaultLeaseTTL), a task's execution lease
// (DefaultTaskLeaseTTL: TaskSpec.LeaseTTL, ClaimTask, HeartbeatTask); and
// the bounds past which they are a *ValidationError (errors.Is
// ErrInvalidInput) on the field: negative, not whole seconds, past
// MaxWindow or MaxLeaseTTL.
func TestZeroDurationsTakeTheirDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ttl  time.Duration
		want int32 // seconds; -1: refused
	}{
		{0, int32(DefaultTaskLeaseTTL / time.Second)},
		{time.Second, 1},
		{MaxLeaseTTL, int32(MaxLeaseTTL / time.Second)},
		{-time.Second, -1},
		{time.Duration(math.MinInt64), -1},
		{1500 * time.Millisecond, -1},
		{MaxLeaseTTL + time.Second, -1},
		{time.Duration(math.MaxInt64), -1},
	} {
		got, err := leaseSeconds("leaseTTL", c.ttl)
		var invalid *ValidationError
		switch {
		case c.want < 0 && (!errors.As(err, &invalid) || !errors.Is(err, ErrInvalidInput) || invalid.Field != "leaseTTL"):
			t.Errorf("leaseSeconds(%v) = %d, %v; want a *ValidationError on leaseTTL", c.ttl, got, err)
		case c.want >= 0 && (err != nil || got != c.want):
			t.Errorf("leaseSeconds(%v) = %d, %v; want %d s", c.ttl, got, err, c.want)
		}
	}
	scope := Scope{Type: "t", Key: "k"}
	windows, leases, err := splitLimits([]Limit{
		{Scope: scope, Metric: MetricRequests, Limit: 1, Amount: 1},
		{Scope: scope, Metric: MetricConcurrent, Limit: 1, Amount: 1},
		{Scope: scope, Metric: MetricTokens, Limit: 1, Amount: 1, Window: MaxWindow},
		{Scope: Scope{Type: "t", Key: "other"}, Metric: MetricConcurrent, Limit: 1, Amount: 1, LeaseTTL: MaxLeaseTTL},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(windows) != 2 || windows[0].windowSeconds != int32(DefaultWindow/time.Second) || windows[1].windowSeconds != int32(MaxWindow/time.Second) {
		t.Errorf("windows %+v, want %v (DefaultWindow) and %v (MaxWindow)", windows, DefaultWindow, MaxWindow)
	}
	if len(leases) != 2 || leases[0].ttlSeconds != int32(DefaultLeaseTTL/time.Second) || leases[1].ttlSeconds != int32(MaxLeaseTTL/time.Second) {
		t.Errorf("leases %+v, want %v (DefaultLeaseTTL) and %v (MaxLeaseTTL)", leases, DefaultLeaseTTL, MaxLeaseTTL)
	}
}
