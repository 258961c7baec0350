// Package bench holds the workloads of `pgadmit bench`: ten fixed definitions, W1..W5, which
// mirror the reference harness of the seed gateway, the gateway-shaped W6..W8, W9, which
// measures stranding, and T1, gateway requests run as tasks, which runs only when asked for; run
// by N concurrent workers against a migrated database through the public ratelimit API.
//
// Every run draws a random run id and puts it in every scope key it touches, so runs never
// disturb each other, or a database's other data.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/grace"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Defaults of Config.
const (
	DefaultWorkers   = 16
	DefaultDuration  = 5 * time.Second
	ExactnessSeconds = 2 // W4 (each of its two parts) and W5 run this long, whatever Duration says
)

// Config says how to run the workloads.
type Config struct {
	// Workers is the number of concurrent workers, each with its own connection.
	Workers int
	// Instances is how many Limiters the workers are spread over, as that many gateway
	// instances sharing the database would be: worker w calls instance w mod Instances, and
	// each instance combines only its own workers' calls. Instances contend with each other on
	// the rows and scopes they share, as separate processes do. Zero means 1; at most Workers.
	Instances int
	// Duration is how long W1, W2, W3, W6, W7, W8 and T1 run, and W9 (4 s at least).
	Duration time.Duration
	// ExactnessDuration is how long W4 (each part) and W5 run; zero means ExactnessSeconds.
	ExactnessDuration time.Duration
	// Only lists the workload codes to run ("W1", "W4"...); empty runs them all but those
	// that run only when listed (Workload.OptIn: T1).
	Only []string
	// RunID goes into every scope key; empty draws a random one. The workloads' book
	// checks take its scopes to be empty when the run starts: a RunID used before in the
	// same database fails them.
	RunID string
	// Limiter options, e.g. ratelimit.WithoutCombining(); none: the defaults.
	Options []ratelimit.Option
	// Think is the mean pause between an admitted Reserve and its Commit, as a gateway waits
	// for its upstream call; each pause is drawn uniformly from zero to twice Think. Latency
	// percentiles leave the pause out, ops/s does not (a worker that waits admits less: raise
	// Workers with it). Zero: no pause, every worker calls back to back.
	Think time.Duration
	// Rounds is how many times the selected workloads run, one round after the other, in the
	// same database and with the same scope keys (nothing is reset in between), so that a
	// later round shows what a grown table costs; zero means 1.
	Rounds int
	// BeforeEach and AfterEach, when set, are called before and after each workload of each
	// round (round counts from 1), outside the measurement; an error stops the run.
	BeforeEach func(ctx context.Context, w Workload, round int) error
	AfterEach  func(ctx context.Context, r Result) error
	// Progress, when set, is called every ProgressEvery while a workload runs, from a
	// goroutine of its own (never once the workload has ended, nor at the same time as
	// another call), with how far the workload has got. A workload shorter than ProgressEvery
	// is not reported.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// Grace bounds what a run that ctx ended gives back before Run returns: the grants its
	// workers hold (those in their Think pause, W4's admissions) and its Limiters' Local blocks
	// and give-backs (Limiter.Close). Zero means DefaultGrace. What a frozen server did not
	// take back within it stays held until a lease's TTL, a window's end or Recover ends it,
	// and Run's error then matches ErrLeftHeld.
	Grace time.Duration
}

// DefaultGrace is Config.Grace when zero: a live server takes back what a run held in
// milliseconds; a frozen one must not hold up a Ctrl-C for longer.
const DefaultGrace = grace.Default

// ErrLeftHeld is joined to Run's error when, after ctx ended, some of what the workers held
// was not given back within Config.Grace (the server did not answer): a lease's TTL, a
// window's end or Recover ends it. It is the demo's too.
var ErrLeftHeld = grace.ErrLeftHeld

// Workload describes one workload.
type Workload struct {
	Code        string // W1..W9, T1
	Name        string // starts with Code, e.g. "W1 window, many keys"
	Description string
}

// OptIn reports whether the workload runs only when Config.Only lists it: T1, so that the
// default run stays W1..W9, as measured and compared over the days, and writes no tasks.
func (w Workload) OptIn() bool { return w.Code == "T1" }

// runs reports whether cfg runs w.
func (c Config) runs(w Workload) bool {
	if len(c.Only) == 0 {
		return !w.OptIn()
	}
	return slices.Contains(c.Only, w.Code)
}

// Workloads returns the workloads, in order.
func Workloads() []Workload {
	return []Workload{
		{"W1", "W1 window, many keys", "reserve one window limit (requests, 60 s, limit never reached) on a key chosen at random from 10,000, then commit"},
		{"W2", "W2 gateway request", "reserve requests/min and tokens/min (estimate 500) on api_key:K (K of 1,000) and a concurrent limit of 1,000 on model:M (M of 5); commit actual tokens 420, which releases the lease"},
		{"W3", "W3 hot key", "W1 on one key"},
		{"W4", "W4 exactness", "one key with a limit of 100 in a window that cannot roll over, all workers reserve: exactly 100 admitted; then a concurrent limit of 10 with leases never released: exactly 10"},
		{"W5", "W5 opposite orders", "two window limits, half the workers list them in one order and half in the other; reserve and commit: no deadlock error (SQLSTATE 40P01)"},
		{"W6", "W6 gateway, shared model", "a gateway request: requests/min and tokens/min (estimate 500) on api_key:K (K of 1,000), tokens/min on the ONE provider model every request uses, and a concurrent limit of 1,000 on it; commit actual tokens 420"},
		{"W7", "W7 W6 with allotments", "W6 with the provider model's tokens/min admitted from local allotments (Limit.Local); the Limiter is closed at the end, returning its blocks, before its books are checked"},
		{"W8", "W8 hot key, allotment", "W3 with the limit admitted from a local allotment: no round trip"},
		{"W9", "W9 stranding", "one key with a limit of 2,000 per 2 s window, admitted from local allotments by at least 4 instances (fewer with fewer workers), far past it: once the blocks went back, no window admitted past the limit, and in every window that refused a request the units left unadmitted (stranded in blocks while requests were refused) are at most instances x 2 x 1/16 of the limit"},
		{"T1", "T1 gateway tasks", "a long gateway request run as a sync task: create it on api_key:K (K of 1,000) with a queue_size limit of 1,000, reserve W2's limits for its attempt, heartbeat it 3 times (with --think, a pause before each), commit actual tokens 420 and finish it; the row's latency is the whole task's, and its steps' latencies follow"},
	}
}

// ParseOnly parses a comma-separated list of workload codes (case-insensitive), such as
// "W1,w4", into canonical codes, refusing unknown ones.
func ParseOnly(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	known := map[string]bool{}
	for _, w := range Workloads() {
		known[w.Code] = true
	}
	var out []string
	for _, part := range strings.Split(s, ",") {
		code := strings.ToUpper(strings.TrimSpace(part))
		if !known[code] {
			var codes []string
			for _, w := range Workloads() {
				codes = append(codes, w.Code)
			}
			return nil, fmt.Errorf("unknown workload %q: want one of %s", strings.TrimSpace(part), strings.Join(codes, ", "))
		}
		if !slices.Contains(out, code) {
			out = append(out, code)
		}
	}
	return out, nil
}

// Check is one exactness condition a workload verified.
type Check struct {
	Name string `json:"name"`
	Want int64  `json:"want"`
	Got  int64  `json:"got"`
	OK   bool   `json:"ok"`
	// AtMost says Want is a bound, not the value: Got may be below it.
	AtMost bool `json:"at_most,omitempty"`
}

// Step is the latency of one kind of call of a workload's operations.
type Step struct {
	Name  string `json:"name"` // "heartbeat"
	Calls int64  `json:"calls"`
	P50us int64  `json:"p50_us"`
	P99us int64  `json:"p99_us"`
}

// Result is what one workload measured. Its JSON names are those of the reference harness.
type Result struct {
	Name    string  `json:"name"`
	Workers int     `json:"workers"`
	Seconds float64 `json:"seconds"`
	Ops     int64   `json:"ops"` // admitted or refused; failed ones count in Errors only
	OpsPerS float64 `json:"ops_per_s"`
	P50us   int64   `json:"p50_us"`
	P99us   int64   `json:"p99_us"`
	// P50ns and P99ns are the same in nanoseconds: an admission from a
	// local allotment (W8) takes about a microsecond, which p50_us rounds
	// down, to 0 on a fast machine.
	P50ns     int64 `json:"p50_ns"`
	P99ns     int64 `json:"p99_ns"`
	Admitted  int64 `json:"admitted"`
	Rejected  int64 `json:"rejected"`
	Errors    int64 `json:"errors"`
	Deadlocks int64 `json:"deadlocks"`
	// ReservesPerStatement and SettlesPerStatement are how many Reserve and
	// Commit calls one statement carried on average (combining; 1 without).
	ReservesPerStatement float64 `json:"reserves_per_statement,omitempty"`
	SettlesPerStatement  float64 `json:"settles_per_statement,omitempty"`
	// ReserveStatementUs and SettleStatementUs are how long one such
	// statement took on average from taking a pool connection (the wait
	// for one included) to its answer, in microseconds;
	// ReserveBusyPercent and SettleBusyPercent the share of the run that
	// each instance had one in flight (statements in flight on average, in
	// percent, with more than one allowed: see ratelimit's CombinerStats).
	ReserveStatementUs float64 `json:"reserve_statement_us,omitempty"`
	SettleStatementUs  float64 `json:"settle_statement_us,omitempty"`
	ReserveBusyPercent float64 `json:"reserve_busy_percent,omitempty"`
	SettleBusyPercent  float64 `json:"settle_busy_percent,omitempty"`
	// HotPercent is the share of those statements, of both kinds, sent as
	// hot batches (two calls on one counter or concurrency scope: see ratelimit's CombinerStats).
	HotPercent float64 `json:"hot_percent,omitempty"`
	// LocalBlocks is how many blocks of Local limits (W7, W8, W9) the database
	// granted during the run, LocalFailures how many of their statements
	// failed: Local limits were then decided in the database, and a check
	// fails (see ratelimit's LocalStats). LocalInDatabase is how many Local
	// limits no block could serve, which the database decided: in W8 those
	// of a window's last moments (AllotmentOptions.Margin), in W9 most of
	// its refusals.
	LocalBlocks     int64 `json:"local_blocks,omitempty"`
	LocalFailures   int64 `json:"local_failures,omitempty"`
	LocalInDatabase int64 `json:"local_in_database,omitempty"`
	// FirstError is the message of the first error, if any.
	FirstError string `json:"first_error,omitempty"`
	// Steps are the latencies of each kind of call of the operations (T1's: one operation
	// is several calls), of the calls that succeeded.
	Steps  []Step  `json:"steps,omitempty"`
	Checks []Check `json:"checks,omitempty"`
	// unreachable counts the Errors that did not reach the database (see Run's ErrUnreachable).
	unreachable int64
	// OK is false when an error occurred or a check failed.
	OK bool `json:"ok"`
	// Round is the round the result is of, from 1 (see Config.Rounds).
	Round int `json:"round"`
}

// Code returns the workload code that starts the result's name.
func (r Result) Code() string { code, _, _ := strings.Cut(r.Name, " "); return code }

// NewRunID returns a random run id of 8 hex digits.
func NewRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Run runs the selected workloads one after the other on pool, cfg.Rounds times, calling
// cfg.BeforeEach before each, cfg.AfterEach and done after each, and returns their results, round by round.
// pool must allow at least cfg.Workers connections. It stops early, returning ctx's error, when
// ctx ends, along with the results of the workloads that finished; an error of a single operation
// is counted, not returned. It stops too, returning an error matching ErrUnreachable, after the
// first workload (reported to done) whose every operation failed to reach the database. Before
// it returns, it gives back what its workers hold and closes its Limiters, within cfg.Grace
// once ctx has ended.
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config, done func(Result)) ([]Result, error) {
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("bench: need at least one worker, got %d", cfg.Workers)
	}
	if cfg.Duration <= 0 {
		return nil, fmt.Errorf("bench: duration must be positive, got %s", cfg.Duration)
	}
	if cfg.Rounds < 0 {
		return nil, fmt.Errorf("bench: rounds must not be negative, got %d", cfg.Rounds)
	}
	cfg.Rounds = max(cfg.Rounds, 1)
	if cfg.ExactnessDuration <= 0 {
		cfg.ExactnessDuration = ExactnessSeconds * time.Second
	}
	if cfg.RunID == "" {
		cfg.RunID = NewRunID()
	}
	if cfg.Think < 0 {
		return nil, fmt.Errorf("bench: think time must not be negative, got %s", cfg.Think)
	}
	cfg.Instances = max(cfg.Instances, 1)
	if cfg.Instances > cfg.Workers {
		return nil, fmt.Errorf("bench: %d instances need at least as many workers, got %d", cfg.Instances, cfg.Workers)
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	gr := grace.After(ctx, cfg.Grace)
	defer gr.End()
	r := &runner{cfg: cfg, pool: pool, prefix: "bench-" + cfg.RunID, paused: make([]time.Duration, cfg.Workers),
		counts: make([]opsCounter, cfg.Workers), grace: gr, reads: execModeDB{pool},
		books: map[scopeSet]holdings{}, unknownBooks: map[scopeSet]bool{}}
	r.lims = r.limiters()
	out, err := r.run(ctx, done)
	// Close waits for the give-backs of what a Reserve cut short by ctx granted: they would be
	// lost with the pool.
	r.grace.Close(r.lims...)
	if gr.LeftHeld() {
		err = errors.Join(err, ErrLeftHeld)
	}
	return out, err
}

// run runs the rounds of Run.
func (r *runner) run(ctx context.Context, done func(Result)) ([]Result, error) {
	cfg := r.cfg
	runs := map[string]func(context.Context) (Result, error){
		"W1": r.w1, "W2": r.w2, "W3": r.w3, "W4": r.w4, "W5": r.w5,
		"W6": r.w6, "W7": r.w7, "W8": r.w8, "W9": r.w9, "T1": r.t1,
	}
	var out []Result
	for round := 1; round <= cfg.Rounds; round++ {
		for _, w := range Workloads() {
			if !cfg.runs(w) {
				continue
			}
			if cfg.BeforeEach != nil {
				if err := cfg.BeforeEach(ctx, w, round); err != nil {
					return out, fmt.Errorf("before %s: %w", w.Name, err)
				}
			}
			stop := r.watch(w, round)
			r.round = round
			res, err := runs[w.Code](ctx)
			stop()
			if err != nil {
				return out, fmt.Errorf("%s: %w", w.Name, err)
			}
			res.Name = w.Name
			res.Round = round
			res.OK = res.Errors == 0
			for _, c := range res.Checks {
				res.OK = res.OK && c.OK
			}
			out = append(out, res)
			if cfg.AfterEach != nil {
				if err := cfg.AfterEach(ctx, res); err != nil {
					return out, fmt.Errorf("after %s: %w", w.Name, err)
				}
			}
			if done != nil {
				done(res)
			}
			if allUnreachable(res) {
				// The server is gone: the workloads left would fail alike, each for its
				// full duration (W4 and W5 too), before the run could say so.
				return out, fmt.Errorf("%s: %w, first: %s", w.Name, ErrUnreachable, res.FirstError)
			}
		}
	}
	return out, nil
}

type runner struct {
	cfg    Config
	pool   *pgxpool.Pool
	lims   []*ratelimit.Limiter // one per instance (Config.Instances)
	prefix string
	// paused is how long each worker's current operation paused (Config.Think); only the
	// worker itself touches its element.
	paused []time.Duration
	// counts are the workers' decided operations in the running workload, for Config.Progress.
	counts []opsCounter
	// keep is how many latencies each worker keeps (latencies); 0: maxLatencies over the workers.
	keep int
	// round is the round running, from 1.
	round int
	// grace bounds what the run gives back: it ends Config.Grace after Run's ctx, and notes
	// what it left held.
	grace *grace.Grace
	// reads is pool for the run's own reads of what the workloads left (execModeDB).
	reads db.DBTX
	// books are the holdings of the workloads' scope sets as last read, and unknownBooks
	// those that a workload whose operations failed left unknown (checkingBooks).
	books        map[scopeSet]holdings
	unknownBooks map[scopeSet]bool
}
