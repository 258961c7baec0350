// Package connset keeps, for a test server (deadserver, freezer), the connections it accepted
// and the goroutines it started, so that its Close can close every one and return once every
// goroutine has: one left running would outlive the test that started the server.
package connset

import (
	"net"
	"sync"
)

// Set is a server's connections and goroutines. Its zero value is empty and open.
type Set struct {
	mu     sync.Mutex
	closed bool // Close has begun: Keep closes what it is given, Go starts nothing
	conns  []net.Conn
	wg     sync.WaitGroup
}

// Keep keeps c, to be closed by Close, and reports whether it did: once Close has begun it
// closes c instead (one an accept loop took as Close ran).
func (s *Set) Keep(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

// Go runs f in a goroutine that Close waits for, and reports whether it did: once Close has
// begun it starts nothing. f must return once its server's listener and the connections kept
// are closed.
func (s *Set) Go(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(f)
	return true
}

// Close closes the connections kept, and those Keep is given from now on, then returns once
// every goroutine Go started has returned. The server closes its listener first, so that its
// accept loop ends. Calling it again closes nothing more, and waits as well.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
}
