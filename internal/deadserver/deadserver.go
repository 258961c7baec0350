// Package deadserver stands in for a database that fails: one whose host froze (it accepts
// connections and never answers) and one that is down (connecting is refused at once). The
// demo and the tests of the failure policies point pgx at them.
package deadserver

import (
	"net"
	"strconv"
	"sync"

	"github.com/pgadmit/pgadmit/internal/pgcluster"
)

// Hanging is a TCP server on 127.0.0.1 that accepts connections and never answers.
type Hanging struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// Hang starts a Hanging server; Close stops it.
func Hang() (*Hanging, error) {
	ln, err := net.Listen("tcp", pgcluster.Host+":0")
	if err != nil {
		return nil, err
	}
	h := &Hanging{ln: ln}
	go h.hold()
	return h, nil
}

// hold accepts connections and keeps them open, unanswered, until Close.
func (h *Hanging) hold() {
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.mu.Lock()
		h.conns = append(h.conns, c)
		h.mu.Unlock()
	}
}

// Addr is the server's host:port.
func (h *Hanging) Addr() string { return h.ln.Addr().String() }

// Close stops accepting and drops the connections held.
func (h *Hanging) Close() {
	h.ln.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.Close()
	}
}

// Stopped returns a host:port on 127.0.0.1 where nothing listens (it was free a moment ago).
func Stopped() (string, error) {
	port, err := pgcluster.FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(pgcluster.Host, strconv.Itoa(port)), nil
}
