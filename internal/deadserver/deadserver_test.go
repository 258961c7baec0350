package deadserver

import (
	"errors"
	"net"
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
