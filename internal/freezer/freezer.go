// Package freezer is a TCP proxy for tests: in front of a PostgreSQL
// server it passes everything on until frozen, then holds the server's
// answers and answers no new connection, as when the server's host froze
// mid-statement.
package freezer

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Freezer is a proxy to one server, closed at the end of the test that
// started it.
type Freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	// sentFrozen is told when a client sent something while frozen (a
	// statement that will get no answer).
	sentFrozen chan struct{}
	mu         sync.Mutex
	conns      []net.Conn
}

// New starts a Freezer to target (host:port) until the test ends.
func New(t testing.TB, target string) *Freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Freezer{ln: ln, sentFrozen: make(chan struct{}, 1)}
	t.Cleanup(f.Close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.keep(c)
			if f.frozen.Load() {
				continue // accepted, never answered
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.keep(s)
			go f.statements(c, s)
			go f.answers(c, s)
		}
	}()
	return f
}

// Addr is where the Freezer listens (host:port).
func (f *Freezer) Addr() string { return f.ln.Addr().String() }

// Port is the port the Freezer listens on.
func (f *Freezer) Port() uint16 { return uint16(f.ln.Addr().(*net.TCPAddr).Port) }

// Freeze stops passing on the server's answers, and answering new
// connections.
func (f *Freezer) Freeze() { f.frozen.Store(true) }

// SentFrozen is told when a client sent something while frozen: a
// statement that will get no answer.
func (f *Freezer) SentFrozen() <-chan struct{} { return f.sentFrozen }

// Close stops the proxy and drops its connections (the cancel requests
// pgx sends on a frozen server's connections wait for them up to 15 s).
// The test's end calls it too; calling it again does nothing more.
func (f *Freezer) Close() {
	f.frozen.Store(false)
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

func (f *Freezer) keep(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, c)
}

// statements passes on what client sends to server, and tells sentFrozen
// when it came while frozen.
func (f *Freezer) statements(client, server net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			if _, err := server.Write(buf[:n]); err != nil {
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
		for f.frozen.Load() {
			time.Sleep(time.Millisecond)
		}
		if n > 0 {
			if _, err := client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			client.Close()
			return
		}
	}
}
