package freezer

import (
	"errors"
	"net"
	"testing"
	"time"
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
	released := false
	letGo := func() {
		if !released {
			released = true
			close(release)
		}
	}
	defer letGo()
	f := start(t, server.Addr().String(), func() {
		accepted <- struct{}{}
		<-release
	})
	if hold {
		f.Hold()
	}
	c, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-accepted
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		f.Close()
	}()
	// Close has closed the listener once a new connection is refused.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		d, err := net.Dial("tcp", f.Addr())
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
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read on the connection accepted during Close: %v, want it closed by the Freezer", err)
	}
	server.(*net.TCPListener).SetDeadline(time.Now().Add(100 * time.Millisecond))
	if s, err := server.Accept(); err == nil {
		s.Close()
		t.Fatal("the Freezer connected to the server for a connection accepted during Close")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
