package ratelimit_test

import (
	"net"
	"testing"
	"time"
)

// enteringConn tells, on entered, each time a Read of it begins.
type enteringConn struct {
	net.Conn
	entered chan struct{}
}

func (c *enteringConn) Read(b []byte) (int, error) {
	select {
	case c.entered <- struct{}{}:
	default:
	}
	return c.Conn.Read(b)
}

// heldConn holds back the answer to a statement naming its key also when
// the Read that receives it began before the statement was written: pgx's
// background reader, which pgx starts when a write takes longer than 15 ms
// (a loaded machine), reads so. That answer once passed, and a caller who
// left got its grant (TestReserveCallersWhoAllLeaveABatchHoldNothing: "a
// caller who left: <nil>").
func TestHeldConnHoldsAnAnswerToAReadBegunBeforeTheStatement(t *testing.T) {
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	h := &heldAnswers{key: []byte("k-1"), let: make(chan struct{})}
	t.Cleanup(h.release)
	entered := make(chan struct{}, 1)
	c := &heldConn{Conn: &enteringConn{Conn: client, entered: entered}, h: h}

	got := make(chan string, 1)
	go func() { // the background reader, reading before the statement is written
		b := make([]byte, 64)
		n, err := c.Read(b)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(b[:n])
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the read never began")
	}
	go func() { // the server: reads the statement, answers it
		b := make([]byte, 64)
		if _, err := server.Read(b); err != nil {
			return
		}
		_, _ = server.Write([]byte("answer"))
	}()
	if _, err := c.Write([]byte("statement naming k-1")); err != nil {
		t.Fatal(err)
	}
	select {
	case answer := <-got:
		t.Fatalf("read %q while the answers were held", answer)
	case <-time.After(200 * time.Millisecond): // held (a passed answer comes at once)
	}
	h.release()
	select {
	case answer := <-got:
		if answer != "answer" {
			t.Fatalf("read %q once released, want the answer", answer)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer never came once released")
	}
}
