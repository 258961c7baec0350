// Package closecheck checks, for the tests of pgadmit's stand-in servers (deadserver,
// freezer), that Close closes a connection its accept loop took while Close ran.
package closecheck

import (
	"errors"
	"net"
	"testing"
	"time"
)

// AcceptedDuringClose connects to addr, a server whose accept loop, for that connection,
// signals accepted and then waits until letGo is called (its hook between Accept and keeping
// the connection), and runs closeServer meanwhile. It fails t unless closeServer closes the
// listener, waits for the accept loop (it must not return before letGo), returns once the
// loop can end, and leaves the connection closed: left open, its client would hang on it
// for good, after the test that started the server ended. letGo may be called more than once.
func AcceptedDuringClose(t testing.TB, addr string, accepted <-chan struct{}, letGo, closeServer func()) {
	t.Helper()
	defer letGo()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		closeServer()
		t.Fatal(err)
	}
	defer c.Close()
	<-accepted
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		closeServer()
	}()
	// Close has closed the listener once a new connection is refused.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		d, err := net.Dial("tcp", addr)
		if err != nil {
			break
		}
		d.Close()
		if time.Now().After(deadline) {
			t.Fatal("Close never closed the listener")
		}
	}
	select {
	case <-closed:
		t.Fatal("Close returned while the accept loop still ran")
	case <-time.After(50 * time.Millisecond):
	}
	letGo()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return once the accept loop could end")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || IsTimeout(err) {
		t.Fatalf("read on the connection accepted during Close: %v, want it closed by the server", err)
	}
}

// IsTimeout reports whether err is a network timeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// LetGo returns a func that closes release once, however often it is called.
func LetGo(release chan struct{}) func() {
	released := false
	return func() {
		if !released {
			released = true
			close(release)
		}
	}
}
