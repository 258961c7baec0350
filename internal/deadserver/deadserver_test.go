package deadserver

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/pgadmit/pgadmit/internal/closecheck"
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
	closecheck.AcceptedDuringClose(t, h.Addr(), accepted, closecheck.LetGo(release), h.Close)
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
