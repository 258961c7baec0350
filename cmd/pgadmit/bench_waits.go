package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/bench"
)

// waitsInterval is how often --waits samples the workers' sessions.
const waitsInterval = 10 * time.Millisecond

// waitClass is what a session executing a statement was doing when sampled.
type waitClass int

const (
	waitRunning waitClass = iota // on a processor, or waiting for one: no wait event
	waitWALIO                    // writing or flushing the WAL itself (a commit flushing its record)
	waitWALLock                  // waiting for a WAL lock another backend holds (most often its flush)
	waitLock                     // a heavyweight lock: a row another transaction holds, say
	waitOther                    // anything else: reading data, a buffer's lock, ...
	numWaitClasses
)

// classifyWait says what a sampled session was doing; ok is false when it was not executing a
// statement (idle, waiting for its client's next one).
func classifyWait(row db.BenchSessionActivityRow) (class waitClass, ok bool) {
	if row.State != "active" {
		return 0, false
	}
	switch {
	case row.WaitEventType == "":
		return waitRunning, true
	case row.WaitEventType == "IO" && strings.HasPrefix(row.WaitEvent, "WAL"):
		return waitWALIO, true
	case row.WaitEventType == "LWLock" && (row.WaitEvent == "WALWrite" || row.WaitEvent == "WALInsert"):
		return waitWALLock, true
	case row.WaitEventType == "Lock":
		return waitLock, true
	default:
		return waitOther, true
	}
}

// waitTally counts the samples of one workload.
type waitTally struct {
	samples int64                 // times the sessions were read
	active  [numWaitClasses]int64 // sessions executing a statement, by what they did, summed over samples
}

func (t *waitTally) add(rows []db.BenchSessionActivityRow) {
	t.samples++
	for _, row := range rows {
		if class, ok := classifyWait(row); ok {
			t.active[class]++
		}
	}
}

func (t *waitTally) merge(o waitTally) {
	t.samples += o.samples
	for i := range t.active {
		t.active[i] += o.active[i]
	}
}

// workloadWaitsJSON is one workload of the waits field of bench's --json document.
type workloadWaitsJSON struct {
	Workload string `json:"workload"`
	Samples  int64  `json:"samples"`
	// InFlight is how many of the workers' statements were executing at once, on average.
	InFlight float64 `json:"in_flight"`
	// The shares of their time, in percent: running (or waiting for a processor), the WAL
	// (WALPct, which is WALIOPct, writing or flushing it, plus WALLockPct, waiting for a WAL
	// lock another backend holds, most often through its flush), waiting for a lock, anything
	// else.
	RunningPct float64 `json:"running_pct"`
	WALPct     float64 `json:"wal_pct"`
	WALIOPct   float64 `json:"wal_io_pct"`
	WALLockPct float64 `json:"wal_lock_pct"`
	LockPct    float64 `json:"lock_pct"`
	OtherPct   float64 `json:"other_pct"`
}

func (t waitTally) report(workload string) workloadWaitsJSON {
	w := workloadWaitsJSON{Workload: workload, Samples: t.samples}
	var executing int64
	for _, n := range t.active {
		executing += n
	}
	if t.samples > 0 {
		w.InFlight = float64(executing) / float64(t.samples)
	}
	if executing > 0 {
		pct := func(c waitClass) float64 { return 100 * float64(t.active[c]) / float64(executing) }
		w.RunningPct, w.WALIOPct, w.WALLockPct, w.LockPct, w.OtherPct = pct(waitRunning), pct(waitWALIO), pct(waitWALLock), pct(waitLock), pct(waitOther)
		w.WALPct = w.WALIOPct + w.WALLockPct
	}
	return w
}

// benchWaits samples, every waitsInterval while a workload runs, what the workers' sessions
// (those named application) are doing, on a connection of its own. A nil *benchWaits (--waits
// off) does nothing.
type benchWaits struct {
	conn        *pgxpool.Conn
	application string

	stop    func()     // ends the running workload's sampler; nil when none runs
	sampled chan error // its tally is final when it sends
	current waitTally  // the running workload's, written by its sampler only

	order      []string // workload names, in the order they ran
	byWorkload map[string]*waitTally
}

// startWaits takes a connection of pool for sampling the sessions named application.
func startWaits(ctx context.Context, pool *pgxpool.Pool, application string) (*benchWaits, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &benchWaits{conn: conn, application: application, byWorkload: map[string]*waitTally{}}, nil
}

// close stops any sampler still running (a workload that failed) and gives the connection back.
func (s *benchWaits) close() {
	if s != nil {
		_ = s.halt()
		s.conn.Release()
	}
}

// halt stops the running sampler, if any, and returns its error.
func (s *benchWaits) halt() error {
	if s.stop == nil {
		return nil
	}
	s.stop()
	s.stop = nil
	return <-s.sampled
}

// beforeWorkload starts sampling.
func (s *benchWaits) beforeWorkload(ctx context.Context, _ bench.Workload, _ int) error {
	if s == nil {
		return nil
	}
	stop := make(chan struct{})
	s.stop = func() { close(stop) }
	s.current = waitTally{}
	s.sampled = make(chan error, 1)
	go func() { s.sampled <- s.sample(ctx, stop) }()
	return nil
}

// sample reads the sessions every waitsInterval until stop is closed. The end of a workload
// does not cancel a read under way (pgx would close the connection): it is the last one.
func (s *benchWaits) sample(ctx context.Context, stop <-chan struct{}) error {
	q := db.New()
	tick := time.NewTicker(waitsInterval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		rows, err := q.BenchSessionActivity(ctx, s.conn, s.application)
		if err != nil {
			if ctx.Err() != nil {
				return nil // bench is stopping (interrupted)
			}
			return fmt.Errorf("sampling the workers' sessions: %w", err)
		}
		s.current.add(rows)
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
	}
}

// afterWorkload stops sampling and adds the samples to the workload's.
func (s *benchWaits) afterWorkload(_ context.Context, r bench.Result) error {
	if s == nil {
		return nil
	}
	if err := s.halt(); err != nil {
		return err
	}
	t, ok := s.byWorkload[r.Name]
	if !ok {
		t = &waitTally{}
		s.byWorkload[r.Name] = t
		s.order = append(s.order, r.Name)
	}
	t.merge(s.current)
	return nil
}

// report returns each workload's waits, over all its rounds, in the order they ran.
func (s *benchWaits) report() []workloadWaitsJSON {
	if s == nil {
		return nil
	}
	out := make([]workloadWaitsJSON, 0, len(s.order))
	for _, name := range s.order {
		out = append(out, s.byWorkload[name].report(name))
	}
	return out
}

// printWaits prints the waits report under the bench table.
func printWaits(w io.Writer, waits []workloadWaitsJSON) {
	if waits == nil {
		return
	}
	fmt.Fprintf(w, "\nwhere the workers' statements spent their time (pg_stat_activity every %s): IN FLIGHT is how\n", waitsInterval)
	fmt.Fprintln(w, "many executed at once on average, the rest shares of their time: RUNNING on a processor (or")
	fmt.Fprintln(w, "waiting for one), WAL I/O writing or flushing the WAL (a commit waits for its flush), WAL LOCK")
	fmt.Fprintln(w, "waiting for a WAL lock another backend holds (most often through its own flush), LOCK waiting")
	fmt.Fprintln(w, "for a lock (a row another transaction holds), OTHER anything else (reading data, buffer locks).")
	width := len("WORKLOAD")
	for _, wl := range waits {
		width = max(width, len(wl.Workload))
	}
	fmt.Fprintf(w, "%-*s %9s %8s %8s %9s %6s %6s %8s\n", width, "WORKLOAD", "IN FLIGHT", "RUNNING", "WAL I/O", "WAL LOCK", "LOCK", "OTHER", "SAMPLES")
	for _, wl := range waits {
		if wl.InFlight == 0 { // no statement seen executing: no shares to give
			fmt.Fprintf(w, "%-*s %9.2f %8s %8s %9s %6s %6s %8d\n", width, wl.Workload, wl.InFlight, "-", "-", "-", "-", "-", wl.Samples)
			continue
		}
		fmt.Fprintf(w, "%-*s %9.2f %7.0f%% %7.0f%% %8.0f%% %5.0f%% %5.0f%% %8d\n",
			width, wl.Workload, wl.InFlight, wl.RunningPct, wl.WALIOPct, wl.WALLockPct, wl.LockPct, wl.OtherPct, wl.Samples)
	}
}
