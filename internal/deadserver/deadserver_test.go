package deadserver

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// A connection accepted while Close runs (Accept had returned it, the server had not kept it
// yet) is closed too, and Close waits for the accept loop: left open, its client would hang
// on it for good, long after the test that started the server ended.
func TestHangingCloseClosesAConnectionAcceptedDuringClose(t *testing.T) {
	accepted, release := make(chan struct{}), make(chan struct{})
	h, err := hang(func() {
		accepted <- struct{}{}
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", h.Addr())
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	defer c.Close()
	<-accepted
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		h.Close()
	}()
	// Close has closed the listener once a new connection is refused.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		d, err := net.Dial("tcp", h.Addr())
		if err != nil {
			break
		}
		d.Close()
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("Close never closed the listener")
		}
	}
	select {
	case <-closed:
		close(release)
		t.Fatal("Close returned while the accept loop still ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return once the accept loop could end")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on the connection accepted during Close: %v, want it closed by the server", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// A Stopped address refuses a connection, and keeps its port until Close: a port only free a
// moment ago could be taken meanwhile by another process's server, and a test expecting a
// refusal would get that server's answer.
func TestStoppedRefusesAndKeepsItsPort(t *testing.T) {
	s, err := Stop()
	if err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("dial %s: connected, want refused", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want ECONNREFUSED", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("another server could listen on %s, the stopped server's port", addr)
	}
	s.Close()
	s.Close() // a second Close does nothing more
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("after Close, listen on %s: %v, want the port let go", addr, err)
	}
	ln.Close()
}
