package connset

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// Close closes the connections kept, and one kept after it began (an accept loop's, taken
// as Close ran) at once: Keep reports it did not keep it.
func TestCloseClosesWhatWasKeptAndWhatComesAfter(t *testing.T) {
	var s Set
	kept, keptPeer := net.Pipe()
	defer keptPeer.Close()
	if !s.Keep(kept) {
		t.Fatal("Keep before Close did not keep the connection")
	}
	s.Close()
	assertClosed(t, kept, "kept before Close")
	late, latePeer := net.Pipe()
	defer latePeer.Close()
	if s.Keep(late) {
		t.Error("Keep after Close reported it kept the connection")
	}
	assertClosed(t, late, "given Keep after Close")
}

// Close returns only once every goroutine Go started has returned; Go after it starts none.
func TestCloseWaitsForTheGoroutinesStarted(t *testing.T) {
	var s Set
	release, ended := make(chan struct{}), make(chan struct{})
	if !s.Go(func() {
		defer close(ended)
		<-release
	}) {
		t.Fatal("Go before Close started nothing")
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		s.Close()
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a goroutine Go started still ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return once the goroutine could end")
	}
	select {
	case <-ended:
	default:
		t.Fatal("Close returned before the goroutine had")
	}
	ran := make(chan struct{})
	if s.Go(func() { close(ran) }) {
		t.Error("Go after Close reported it started a goroutine")
	}
	s.Close() // a second Close waits too: for that goroutine, had Go started one
	select {
	case <-ran:
		t.Error("Go after Close ran its func")
	default:
	}
}

func assertClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("read on the connection %s: %v, want it closed (%v)", what, err, io.ErrClosedPipe)
	}
}
