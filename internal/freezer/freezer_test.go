package freezer

import (
	"net"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/closecheck"
	"github.com/pgadmit/pgadmit/internal/leakcheck"
)

// A connection accepted while Close runs (Accept had returned it, the Freezer had not kept it
// yet) is closed too, and not passed on to the server, and Close waits for the accept loop:
// left open, its client would hang on it for good, after the test that started the Freezer
// ended. So whether the Freezer would pass the connection on or hold it
// unanswered.
func TestCloseClosesAConnectionAcceptedDuringClose(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(map[bool]string{false: "passing", true: "holding"}[hold], func(t *testing.T) {
			closeDuringAccept(t, hold)
		})
	}
}

func closeDuringAccept(t *testing.T, hold bool) {
	server, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	accepted, release := make(chan struct{}), make(chan struct{})
	letGo := closecheck.LetGo(release)
	defer letGo()
	f := start(t, server.Addr().String(), func() {
		accepted <- struct{}{}
		<-release
	})
	if hold {
		f.Hold()
	}
	closecheck.AcceptedDuringClose(t, f.Addr(), accepted, letGo, f.Close)
	server.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if s, err := server.Accept(); err == nil {
		s.Close()
		t.Fatal("the Freezer connected to the server for a connection accepted during Close")
	}
}

// Close returns once every goroutine the Freezer started has returned: its accept loop and
// those of each connection, passed on (one goroutine each way) or left unanswered. One still
// running when Close returned outlives the test that started the Freezer, and shows in the
// next test's leak check. Here one holds a frozen server's answer, and sleeps between looks
// at whether it still must. Each round is a race that a Close not waiting lost most times,
// not always (its goroutines end soon after it); eight rounds lose it.
func TestCloseWaitsForEveryGoroutine(t *testing.T) {
	for range 8 {
		closeLeavesNoGoroutine(t)
	}
}

func closeLeavesNoGoroutine(t *testing.T) {
	const frames = "github.com/pgadmit/pgadmit/internal/freezer."
	before := leakcheck.Snapshot()
	f, _, s := passing(t)
	f.Freeze()
	if _, err := s.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); f.inTransit.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Freezer did not read the server's answer in 5s")
		}
	}
	held := dial(t, f.Addr()) // frozen: left unanswered
	defer held.Close()
	awaitGoroutine(t, before, frames, "(*Freezer).awaitClose")
	// On one processor the goroutines Close wakes run only when it lets them (waiting).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f.Close()
	leakcheck.AwaitNoneIn(t, before, 0, frames)
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// passing starts a Freezer in front of a server of the test's own and returns it with both ends
// of a connection it passes on: the client's, dialled to the Freezer, and the server's. The
// server and both ends are closed when the test ends.
func passing(t *testing.T) (f *Freezer, client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	f = New(t, ln.Addr().String())
	client = dial(t, f.Addr())
	t.Cleanup(func() { _ = client.Close() })
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = server.Close() })
	return f, client, server
}

// awaitGoroutine waits until a goroutine of frames started since before runs fn.
func awaitGoroutine(t *testing.T, before leakcheck.Goroutines, frames, fn string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if slices.ContainsFunc(leakcheck.NewIn(before, frames), func(g string) bool { return strings.Contains(g, fn) }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine ran %s in 5s", fn)
		}
	}
}

// FreezeAt freezes as the text is sent for the nth time, before the server's answer can pass:
// the first sending is answered, the second not (a Freeze after Watch's Sent raced the answer)
// until Unfreeze, which passes on the answer held.
func TestFreezeAtHoldsTheAnswerToTheNthSending(t *testing.T) {
	server, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	go func() { // an echo server
		s, err := server.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		buf := make([]byte, 64)
		for {
			n, err := s.Read(buf)
			if err != nil {
				return
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	f := New(t, server.Addr().String())
	f.FreezeAt("probe", 2)
	c := dial(t, f.Addr())
	defer c.Close()
	buf := make([]byte, 64)
	for i, answered := range []bool{true, false} {
		if _, err := c.Write([]byte("a probe")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Read(buf); (err == nil) != answered {
			t.Fatalf("sending %d: read error %v, want it answered: %t", i+1, err, answered)
		}
	}
	f.Unfreeze()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "a probe" {
		t.Fatalf("after Unfreeze: read %q, %v; want the held answer %q", buf[:n], err, "a probe")
	}
}

// Close returns, and the connections' goroutines end, also when the Freezer is frozen again
// while Close runs: a FreezeAt whose nth sending is a connection's last words (a pool closing a
// connection that a check had used sends its Terminate then) froze it after Close had stopped
// holding the server's answers, and the goroutine passing them on held them for good, so that
// Close waited for it for ever (a test that closed its Freezer early hung until go test's
// timeout). Here Freeze is called again and again while Close runs.
func TestCloseReturnsWhenFrozenAgainWhileClosing(t *testing.T) {
	f, _, _ := passing(t)
	stop := make(chan struct{})
	freezing := make(chan struct{})
	go func() {
		defer close(freezing)
		for {
			select {
			case <-stop:
				return
			default:
				f.Freeze()
				time.Sleep(100 * time.Microsecond)
			}
		}
	}()
	closed := make(chan struct{})
	go func() {
		f.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Error("Close did not return within 5s of a Freeze while it ran")
	}
	close(stop)
	<-freezing
	f.Unfreeze()
	<-closed // unfrozen, and frozen no more, it returns either way
}
