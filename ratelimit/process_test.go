package ratelimit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	neturl "net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// Four gateway processes (separate OS processes) of 16 goroutines share a
// window limit of 1,000 and a concurrency limit of 10, first combining
// their calls, then admitting the window limit from local allotments; one
// of them is SIGKILLed while its other calls are in flight (combined
// statements, or blocks held). They run until the window limit
// has refused requests in stressedWindows windows (so that the limit binds,
// and a window ends under that pressure). No window admits more than
// 1,000 (counting every admission of every process, the victim's up to its
// death), no request is charged to a window that had ended before it was
// made or had not begun when its grant came (on the database's clock),
// never more than 10 requests hold a slot at once (counted at every instant
// across the processes: heldSlots), a window that refused admitted exactly
// 1,000 when combining and stranded no more than the documented bound with
// allotments, no block is above its share of the limit nor admitted more
// than it was granted (the victim's up to its death included), and once
// Recover has given the dead process's blocks back, every counter equals its
// ledger and the admissions: when combining, one per admission; with
// allotments, what the blocks charged (a survivor's block exactly what it
// admitted, the victim's its last report) and one per admission decided in
// the database. When combining, what the victim was granted and never
// committed stays reserved (no task: not Recover's), at most one grant per
// worker, and every window that refused holds exactly 1,000 used or
// reserved. Recover gives back the leases the victim held, and the doctor
// then finds nothing.
func TestExactAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	t.Parallel()
	for _, local := range []bool{false, true} {
		name := "combining"
		if local {
			name = "allotments"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runProcesses(t, local)
		})
	}
}

// stressedWindows is how many windows the window limit must refuse in
// before the processes stop; maxStress bounds the wait for it. A window of
// 8 s fills its 1,000 at 125 admissions/s: this machine, shared and busy,
// has sustained 55 to 250 at 10 slots, in runs of 6 s windows that took up
// to 90 s to fill two.
const (
	stressedWindows = 2
	maxStress       = 3 * time.Minute
)

// procTally gathers what the processes report: admissions per window
// (the victim's apart), per block and in the database, and the windows the
// limit refused in. It closes stop once the limit refused in
// stressedWindows windows.
type procTally struct {
	mu          sync.Mutex
	admitted    map[string]int // window -> admissions of the survivors
	victim      map[string]int // window -> admissions of the victim before it died
	fromBlock   map[string]int // block -> admissions from it, the victim's included
	inDB        map[string]int // window -> admissions of the survivors decided in the database
	victimInDB  map[string]int // window -> the victim's, before it died
	refused     map[string]bool
	victimSlots int64     // slots the victim held as it died
	victimDied  time.Time // on the database's clock, once the parent saw it dead
	stop        chan struct{}
	stopOnce    sync.Once
}

func newProcTally() *procTally {
	return &procTally{admitted: map[string]int{}, victim: map[string]int{}, fromBlock: map[string]int{}, inDB: map[string]int{},
		victimInDB: map[string]int{}, refused: map[string]bool{}, stop: make(chan struct{})}
}

func (p *procTally) halt() { p.stopOnce.Do(func() { close(p.stop) }) }

// admit counts an admission in window w from block (procInDB: decided in
// the database).
func (p *procTally) admit(w, block string, victim bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case block != procInDB:
		p.fromBlock[block]++
	case victim:
		p.victimInDB[w]++
	default:
		p.inDB[w]++
	}
	if victim {
		p.victim[w]++
	} else {
		p.admitted[w]++
	}
}

func (p *procTally) refuse(w string) {
	p.mu.Lock()
	p.refused[w] = true
	n := len(p.refused)
	p.mu.Unlock()
	if n >= stressedWindows {
		p.halt()
	}
}

func runProcesses(t *testing.T, local bool) {
	const processes, workers, limit, slots = 4, 16, 1000, 10
	url := withoutCommitFlush(t, pgtest.NewURL(t))
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	key := uniqueKey("procs")
	orders := procOrders{URL: url, Key: key, Local: local, Window: 8 * time.Second, Limit: limit, Slots: slots,
		Workers: workers, MaxRun: maxStress + time.Minute}

	// Count the slots held across the processes, at every instant.
	if orders.HeldSlots, err = newHeldSlotsFile(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	slotsHeld, err := mapHeldSlots(orders.HeldSlots)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slotsHeld.unmap() })

	tally := newProcTally()
	stressed := time.AfterFunc(maxStress, tally.halt)
	var wg sync.WaitGroup
	for i := range processes {
		o := orders
		o.Victim = i == 0
		o.Proc = i
		wg.Add(1)
		go func() {
			defer wg.Done()
			runChild(t, o, tally, slotsHeld, pool)
		}()
	}
	wg.Wait()
	stressed.Stop()
	tally.halt() // lets go of the children's stdin, had they all ended before

	if len(tally.refused) < stressedWindows {
		t.Errorf("the window limit refused in %d window(s) in %v, want %d: it never bound", len(tally.refused), maxStress, stressedWindows)
	}
	if p := slotsHeld.peak.Load(); p > slots || p < 1 {
		t.Errorf("%d slots held at once, want 1 to the limit %d", p, slots)
	}
	if n := total(slotsHeld.held.Load()); n != 0 {
		t.Errorf("%d slots still held once every process ended", n)
	}
	admitted := map[string]int{} // every process's, the victim's included
	for w, n := range tally.admitted {
		admitted[w] += n
	}
	for w, n := range tally.victim {
		admitted[w] += n
	}
	for w, n := range admitted {
		if n > limit {
			t.Errorf("window %s: %d admitted, limit %d", w, n, limit)
		}
	}
	placed := map[string]int{} // window -> units used or reserved in the database
	for _, c := range counterRows(t, pool, "api_key", key) {
		if c.UsedValue+c.ReservedValue > limit {
			t.Errorf("window %s: used %g + reserved %g over the limit %d", c.WindowStart, c.UsedValue, c.ReservedValue, limit)
		}
		placed[windowName(c.WindowStart)] = int(c.UsedValue + c.ReservedValue)
	}

	// What sat unused while requests were refused: at the end of each
	// window the limit refused in (or of the run, for the last), the
	// units of the window not admitted. Combining holds none: every unit
	// not used or reserved was there to admit (the victim's grants that it
	// had not written out count as admitted). Blocks hold at most two per
	// process (README, Stranding): the units not admitted, of which the
	// victim's may be a few it did not write out.
	bound := processes * 2 * limit * ratelimit.DefaultAllotmentMaxShare
	if !local {
		bound = 0
	}
	stranded := map[string]int{}
	for w := range tally.refused {
		if stranded[w] = limit - admitted[w]; !local {
			stranded[w] = limit - placed[w]
		}
		if float64(stranded[w]) > bound {
			t.Errorf("window %s: %d of %d admitted while requests were refused: %d units stranded, bound %g", w, admitted[w], limit, stranded[w], bound)
		}
	}
	// The victim's leases lapse, and Recover releases them.
	waitPast(t, pool, tally.victimDied.Add(procLeaseTTL+time.Second))

	m := ratelimit.NewMaintenance(pool, ratelimit.WithLostAllotmentGrace(procLostGrace))
	var recovered ratelimit.RecoveryResult
	var leftOpen int64 // when combining: the victim's grants it never committed
	if local {
		var victim string
		recovered, victim = recoverVictim(t, pool, m, key, limit)
		charged := blocksCharge(t, pool, key, victim, tally)
		for _, c := range counterRows(t, pool, "api_key", key) {
			// What the blocks charged (the victim's its last report), and
			// each admission decided in the database (the victim's
			// committed: nothing is left reserved).
			w := windowName(c.WindowStart)
			if want := charged[w] + float64(tally.inDB[w]+tally.victimInDB[w]); c.UsedValue != want || c.UsedValue > limit || c.ReservedValue != 0 {
				t.Errorf("window %s after Recover: used %g, reserved %g; want %g (blocks charged %g, %d+%d admitted in the database), at most %d, nothing reserved",
					w, c.UsedValue, c.ReservedValue, want, charged[w], tally.inDB[w], tally.victimInDB[w], limit)
			}
		}
	} else {
		if recovered, err = m.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, c := range counterRows(t, pool, "api_key", key) {
			// Every admission is used or reserved: the survivors'
			// committed, the victim's committed or, its Commit not landed,
			// reserved. Of what the victim was granted, each worker may
			// have had one grant it never wrote out.
			w := windowName(c.WindowStart)
			if c.UsedValue < float64(tally.admitted[w]) || c.UsedValue+c.ReservedValue < float64(admitted[w]) ||
				c.UsedValue+c.ReservedValue > float64(admitted[w]+workers) {
				t.Errorf("window %s: used %g, reserved %g; want at least the survivors' %d used, and the %d admitted (the victim's %d and at most %d more) used or reserved",
					w, c.UsedValue, c.ReservedValue, tally.admitted[w], admitted[w], tally.victim[w], workers)
			}
		}
		if leftOpen = summary(t, pool).ReservationsOpen; leftOpen > workers {
			t.Errorf("%d reservations open after the run, want at most the victim's one per worker (%d)", leftOpen, workers)
		}
	}
	if r := recovered.ReleasedConcurrencyLeases; r < tally.victimSlots || r > workers {
		t.Errorf("Recover released %d leases, want the victim's: at least the %d slots it held as it died, at most one per worker (%d)", r, tally.victimSlots, workers)
	}
	if s := summary(t, pool); s.LeasesUnreleased != 0 {
		t.Errorf("%d leases unreleased after Recover", s.LeasesUnreleased)
	}
	t.Logf("admitted per window: %v (the victim's: %v); refused in %d window(s), stranded there: %v (bound %g); most slots held at once %d (the victim's as it died: %d); reservations the victim left open %d; recovered %s",
		admitted, tally.victim, len(tally.refused), stranded, bound, slotsHeld.peak.Load(), tally.victimSlots, leftOpen, recovered)
	assertBooksBalance(t, pool, "api_key", key)
	assertDoctorOK(t, pool)
}

// withoutCommitFlush sets synchronous_commit off for the sessions of url:
// what each transaction sees, and so what is admitted, is the same, but on a
// server that flushes each commit to disk an admission no longer holds its
// scope's lock through the flush.
func withoutCommitFlush(t *testing.T, raw string) string {
	t.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("synchronous_commit", "off") // pgx sends it as a run-time parameter
	u.RawQuery = q.Encode()
	return u.String()
}

// procLostGrace is the lost-holder grace of the run's Recover, the
// shortest there is (WithLostAllotmentGrace).
const procLostGrace = 2 * time.Second

// recoverVictim checks the blocks of a run with allotments, no block above
// its share of the limit, and that Recover returns the killed process's
// blocks (the only ones open: the others closed) once their window is over.
// It returns what Recover did and the killed process's holder.
func recoverVictim(t *testing.T, pool *pgxpool.Pool, m *ratelimit.Maintenance, key string, limit float64) (ratelimit.RecoveryResult, string) {
	t.Helper()
	blocks := allotments(t, pool, "api_key", key)
	var lastEnd time.Time
	open, holders := 0, map[string]bool{}
	for _, b := range blocks {
		if share := limit * ratelimit.DefaultAllotmentMaxShare; b.Granted > share {
			t.Errorf("block %s granted %g, above its share of the limit (%g)", b.ID, b.Granted, share)
		}
		if b.ReturnedAt == nil {
			open++
			holders[b.Holder] = true
			lastEnd = maxTime(lastEnd, b.ExpiresAt)
		}
	}
	if open == 0 || len(holders) != 1 {
		t.Fatalf("%d open block(s) of %d holder(s) once the survivors closed (%d blocks in all), want the killed process's", open, len(holders), len(blocks))
	}
	waitPast(t, pool, lastEnd.Add(procLostGrace+100*time.Millisecond)) // its window's end, plus the grace (its last report was before)
	recovered, err := m.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if recovered.ReturnedAllotments != int64(open) {
		t.Errorf("Recover returned %d allotments, want the killed process's %d: %+v", recovered.ReturnedAllotments, open, recovered)
	}
	for _, b := range allotments(t, pool, "api_key", key) {
		if b.ReturnedAt == nil {
			t.Errorf("block %+v still open after Recover", b)
		}
	}
	victim := ""
	for h := range holders {
		victim = h
	}
	return recovered, victim
}

// blocksCharge checks, once every block went back, that no block admitted
// more than it was granted (the victim's, up to its death, included) and
// that each survivor's block charged exactly what it admitted (each
// request committed at its estimate, 1); the victim's charged its last
// report, at most what it was granted. It returns what the blocks charged
// per window.
func blocksCharge(t *testing.T, pool *pgxpool.Pool, key, victim string, tally *procTally) map[string]float64 {
	t.Helper()
	charged := map[string]float64{}
	seen := map[string]bool{}
	for _, b := range allotments(t, pool, "api_key", key) {
		id := b.ID.String()
		seen[id] = true
		n := float64(tally.fromBlock[id])
		charged[windowName(b.WindowStart)] += b.Used
		if n > b.Granted {
			t.Errorf("block %s of %s admitted %g, granted %g", id, b.Holder, n, b.Granted)
		}
		if b.Holder == victim {
			if b.Used > b.Granted {
				t.Errorf("the killed process's block %s charged %g, granted %g (%s)", id, b.Used, b.Granted, b.Reason)
			}
		} else if b.Used != n {
			t.Errorf("block %s of %s charged %g, admitted %g (%s)", id, b.Holder, b.Used, n, b.Reason)
		}
	}
	for id, n := range tally.fromBlock {
		if !seen[id] {
			t.Errorf("%d admission(s) from block %s, which the database does not know", n, id)
		}
	}
	return charged
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// runChild runs one gateway process, adding what it reports to tally, and
// closes its stdin (stop) once tally says so; the victim must die by SIGKILL.
func runChild(t *testing.T, o procOrders, tally *procTally, slots *heldSlots, pool *pgxpool.Pool) {
	t.Helper()
	raw, _ := json.Marshal(o)
	cmd := exec.Command(os.Args[0], "-test.run=^TestProcessChild$", "-test.count=1")
	// GORACE: a child built with -race would sleep a second before it
	// exits, for reports of goroutines that here have all ended.
	cmd.Env = append(os.Environ(), procChildEnv+"="+string(raw), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Error(err)
		return
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Error(err)
		return
	}
	// What a child says on stderr (a data race report, a panic) is shown
	// when it fails: its exit status alone (66 for a race) says too little.
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Error(err)
		return
	}
	go func() {
		<-tally.stop
		_ = stdin.Close()
	}()
	done := false
	scan := bufio.NewScanner(out)
	for scan.Scan() {
		line := scan.Text()
		switch {
		case strings.HasPrefix(line, procAdmit):
			w, block, _ := strings.Cut(strings.TrimPrefix(line, procAdmit), " ")
			tally.admit(w, block, o.Victim)
		case strings.HasPrefix(line, procRefuse):
			tally.refuse(strings.TrimPrefix(line, procRefuse))
		case strings.HasPrefix(line, procError):
			t.Errorf("child: %s", line)
		case line == procDone:
			done = true
		}
	}
	err = cmd.Wait()
	if o.Victim {
		// Its requests are over, its leases live on until they lapse:
		// were one lapsed already, a slot counted as held until now might
		// have been admitted to another.
		tally.victimSlots = slots.release(o.Proc)
		if now, err := testq.OpsNow(context.Background(), pool); err != nil {
			t.Errorf("OpsNow: %v", err) // not Fatal: runChild runs in a goroutine of its own
		} else {
			tally.victimDied = now
		}
		if n := lapsedLeases(t, pool, "model", o.Key); n != 0 {
			t.Errorf("%d lease(s) had lapsed before the victim's slots were given back: the count of slots held is no evidence", n)
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.String() != "signal: killed" {
			t.Errorf("the victim did not die by SIGKILL: %v; its stderr:\n%s", err, stderr.Bytes())
		}
		return
	}
	if err != nil || !done {
		t.Errorf("child: %v (done %v); its stderr:\n%s", err, done, stderr.Bytes())
	}
}

// lapsedLeases is how many leases of the scope lapsed without being released.
func lapsedLeases(t *testing.T, pool *pgxpool.Pool, scopeType, key string) int64 {
	t.Helper()
	rows, err := db.New().InspectLeases(context.Background(), pool, db.InspectLeasesParams{
		ScopeType: pgtype.Text{String: scopeType, Valid: true}, ScopeKey: pgtype.Text{String: key, Valid: true}, MaxRows: 1})
	if err != nil {
		t.Errorf("InspectLeases: %v", err) // not Fatal: runChild runs in a goroutine of its own
		return 0
	}
	var n int64
	for _, r := range rows {
		n += r.ExpiredLeases
	}
	return n
}
