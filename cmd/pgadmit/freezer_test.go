package main

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// freezer is a TCP proxy to a PostgreSQL server that, once frozen, stops passing on the server's
// answers and answers no new connection: the server's host froze (ratelimit's tests have one
// too).
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// newFreezer starts a freezer to target (host:port) until the test ends.
func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln}
	t.Cleanup(f.close)
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
			go f.pass(s, c, false) // what the client sends
			go f.pass(c, s, true)  // the server's answers
		}
	}()
	return f
}

// Addr is where the freezer listens.
func (f *freezer) Addr() string { return f.ln.Addr().String() }

// freeze stops passing on answers, and answering new connections.
func (f *freezer) freeze() { f.frozen.Store(true) }

// pass copies from src to dst until either closes; answers are held while frozen.
func (f *freezer) pass(dst, src net.Conn, answers bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for answers && f.frozen.Load() {
			time.Sleep(time.Millisecond)
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (f *freezer) keep(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, c)
}

// close stops the proxy and drops its connections.
func (f *freezer) close() {
	f.frozen.Store(false)
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}
