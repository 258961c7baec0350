// Package freezer is a TCP proxy for tests: in front of a PostgreSQL
// server it passes everything on until frozen, then holds the server's
// answers and answers no new connection, as when the server's host froze
// mid-statement. Held, it answers no new connection and passes on what the
// ones it answered say, as when a server too busy to take new connections
// (or a pooler in front of it) goes on serving those it has.
package freezer

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/connset"
)

// Freezer is a proxy to one server, closed at the end of the test that
// started it.
type Freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	// closed is set by Close: answers are held no more, whatever freezes
	// the Freezer after (a FreezeAt met by a connection's last sending).
	closed atomic.Bool
	// sentFrozen is told when a client sent something while frozen (a
	// statement that will get no answer).
	sentFrozen chan struct{}
	// holding: new connections are left unanswered, the others go on.
	holding atomic.Bool
	// unanswered counts the connections left unanswered that their client
	// closed (its connect timeout passed).
	unanswered atomic.Int64
	// passed is when bytes last passed either way (Unix nanoseconds), and
	// inTransit how many reads are not passed on yet (AwaitQuiet).
	passed    atomic.Int64
	inTransit atomic.Int64
	// afterAccept is a test's, run between an Accept and keeping what it
	// accepted.
	afterAccept func()
	// stopDialing ends a connection attempt to the server that the accept
	// loop makes, for Close.
	stopDialing context.CancelFunc
	// conns are the connections to clients and to the server, and the
	// goroutines: the accept loop and those of each connection.
	conns   connset.Set
	mu      sync.Mutex // guards watches, and the conns of each, and freezeAts
	watches []*Watch
	// freezeAts are the texts whose sending freezes the Freezer (FreezeAt).
	freezeAts []*freezeAt
}

// freezeAt freezes the Freezer once a client has sent text left more times.
type freezeAt struct {
	text []byte
	left int
}

// Watch is a text that clients send, and the connections on which they did.
type Watch struct {
	f     *Freezer
	text  []byte
	sent  chan struct{}
	conns []net.Conn // under f.mu
}

// New starts a Freezer to target (host:port) until the test ends.
func New(t testing.TB, target string) *Freezer {
	t.Helper()
	return start(t, target, func() {})
}

func start(t testing.TB, target string, afterAccept func()) *Freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dialing, stopDialing := context.WithCancel(context.Background())
	f := &Freezer{ln: ln, sentFrozen: make(chan struct{}, 1), afterAccept: afterAccept, stopDialing: stopDialing}
	t.Cleanup(f.Close)
	f.conns.Go(func() { f.accept(dialing, target) })
	return f
}

// accept takes connections until Close: it passes each on to a connection of its own to
// target, or leaves it unanswered while frozen or holding. One that Accept returns once
// Close has begun is closed at once (Keep), and the loop ends.
func (f *Freezer) accept(dialing context.Context, target string) {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.afterAccept()
		if !f.conns.Keep(c) {
			return
		}
		if f.frozen.Load() || f.holding.Load() {
			f.conns.Go(func() { f.awaitClose(c) }) // accepted, never answered
			continue
		}
		var d net.Dialer
		s, err := d.DialContext(dialing, "tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		if !f.conns.Keep(s) {
			return
		}
		f.conns.Go(func() { f.statements(c, s) })
		f.conns.Go(func() { f.answers(c, s) })
	}
}

// NewPool opens a pool of a copy of cfg whose connections go through a new
// Freezer in front of cfg's server, set up by configure (nil: none; say,
// ratelimit.ConfigurePool), and returns the Freezer and the pool. The
// test's end closes the Freezer first, then the pool: the pool's Close waits
// for statements that a frozen server left unanswered.
func NewPool(t testing.TB, cfg *pgxpool.Config, configure func(*pgxpool.Config)) (*Freezer, *pgxpool.Pool) {
	t.Helper()
	cfg = cfg.Copy()
	f := New(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = "127.0.0.1", f.Port(), nil
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); pool.Close() })
	return f, pool
}

// Addr is where the Freezer listens (host:port).
func (f *Freezer) Addr() string { return f.ln.Addr().String() }

// Port is the port the Freezer listens on.
func (f *Freezer) Port() uint16 { return uint16(f.ln.Addr().(*net.TCPAddr).Port) }

// Freeze stops passing on the server's answers, and answering new
// connections.
func (f *Freezer) Freeze() { f.frozen.Store(true) }

// Unfreeze passes on the server's answers again, those held while frozen first, and answers
// new connections: a server that was slow for a while, or a pooler that queued a statement
// until a session came free, rather than one that froze for good.
func (f *Freezer) Unfreeze() { f.frozen.Store(false) }

// Hold leaves new connections unanswered until Thaw; the ones answered
// so far go on.
func (f *Freezer) Hold() { f.holding.Store(true) }

// Thaw answers new connections again, after Hold.
func (f *Freezer) Thaw() { f.holding.Store(false) }

// AwaitQuiet waits until nothing has passed either way for d, and every
// read is passed on: a client that expects no answer then (in a pause
// between statements) has been handed every answer the server sent it,
// and a Freeze from then on cannot hold one back. Frozen at the moment
// that a statement's commit is visible to another session, its answer
// may still be on its way, and its client left in the dark. It fails the
// test when the traffic goes on for timeout.
func (f *Freezer) AwaitQuiet(t testing.TB, d, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(d / 4) {
		if f.inTransit.Load() == 0 && time.Since(time.Unix(0, f.passed.Load())) >= d {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("freezer: traffic went on for %s, never quiet for %s", timeout, d)
		}
	}
}

// pass passes b on to w, counted in transit from its read (begun) until
// it is written.
func (f *Freezer) pass(w net.Conn, b []byte) error {
	defer f.inTransit.Add(-1)
	_, err := w.Write(b)
	f.passed.Store(time.Now().UnixNano())
	return err
}

// Unanswered is how many of the connections left unanswered their client
// closed: each a connection attempt that gave up.
func (f *Freezer) Unanswered() int64 { return f.unanswered.Load() }

// Watch starts watching for text (a statement's text, which pgx sends
// whole) in what clients send.
func (f *Freezer) Watch(text string) *Watch {
	w := &Watch{f: f, text: []byte(text), sent: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watches = append(f.watches, w)
	return w
}

// FreezeAt freezes the Freezer as a client sends text (a statement's text, or a prepared
// statement's name, which pgx sends with each use) for the nth time, n >= 1, counted over all
// connections: before it reaches the server, so that the statement gets no answer, as when the
// server's host froze just as it came. A Watch's Sent comes too late for that: a local server
// answers in microseconds, before a test can call Freeze.
func (f *Freezer) FreezeAt(text string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.freezeAts = append(f.freezeAts, &freezeAt{text: []byte(text), left: n})
}

// Sent is closed once a client has sent the text.
func (w *Watch) Sent() <-chan struct{} { return w.sent }

// Drop closes the connections on which a client sent the text so far (the
// server ended them, say); the others go on.
func (w *Watch) Drop() {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	for _, c := range w.conns {
		c.Close()
	}
	w.conns = nil
}

// SentFrozen is told when a client sent something while frozen: a
// statement that will get no answer.
func (f *Freezer) SentFrozen() <-chan struct{} { return f.sentFrozen }

// Close stops the proxy and drops its connections (the cancel requests
// pgx sends on a frozen server's connections wait for them up to 15 s),
// one accepted while it runs included, and returns once every goroutine
// the Freezer started has returned: the accept loop and those passing on
// or awaiting what each connection sends. The test's end calls it too;
// calling it again does nothing more.
func (f *Freezer) Close() {
	f.closed.Store(true)  // answers stops holding what the server sent,
	f.frozen.Store(false) // frozen again or not
	f.ln.Close()
	f.stopDialing()
	f.conns.Close()
}

// awaitClose reads what the client of a connection left unanswered sends,
// until it closes the connection.
func (f *Freezer) awaitClose(c net.Conn) {
	buf := make([]byte, 1<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			f.unanswered.Add(1)
			return
		}
	}
}

// saw tells the watches whose text b holds that it was sent on client's
// connection to server, and freezes the Freezer when b is the send that a
// FreezeAt waits for.
func (f *Freezer) saw(b []byte, client, server net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, at := range f.freezeAts {
		if at.left > 0 && bytes.Contains(b, at.text) {
			if at.left--; at.left == 0 {
				f.Freeze()
			}
		}
	}
	for _, w := range f.watches {
		if !bytes.Contains(b, w.text) {
			continue
		}
		if len(w.conns) == 0 {
			select {
			case <-w.sent:
			default:
				close(w.sent)
			}
		}
		w.conns = append(w.conns, client, server)
	}
}

// statements passes on what client sends to server, and tells sentFrozen
// when it came while frozen.
func (f *Freezer) statements(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			f.inTransit.Add(1)
			f.saw(buf[:n], client, server)
			if err := f.pass(server, buf[:n]); err != nil {
				return
			}
			if f.frozen.Load() {
				select {
				case f.sentFrozen <- struct{}{}:
				default:
				}
			}
		}
		if err != nil {
			server.Close()
			return
		}
	}
}

// answers passes on what server sends to client, holding it while frozen.
func (f *Freezer) answers(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			f.inTransit.Add(1)
		}
		for f.frozen.Load() && !f.closed.Load() {
			time.Sleep(time.Millisecond)
		}
		if n > 0 {
			if err := f.pass(client, buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			client.Close()
			return
		}
	}
}
