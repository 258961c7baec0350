package pgtest

import (
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// slowDialProxy is a TCP proxy in front of a PostgreSQL server that connects to the server only
// connectDelay after each client connected: a server slow to accept connections, or a busy
// pooler's, which PgBouncer then takes as long to forward a cancel request to (it opens a server
// connection for each).
type slowDialProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

// startSlowDialProxy starts a slowDialProxy to the server at host (a TCP host, or a Unix socket
// directory) and port, listening on 127.0.0.1 at a free port.
func startSlowDialProxy(host string, port int, connectDelay time.Duration) (*slowDialProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	network, address := "tcp", net.JoinHostPort(host, strconv.Itoa(port))
	if strings.HasPrefix(host, "/") {
		network, address = "unix", filepath.Join(host, ".s.PGSQL."+strconv.Itoa(port))
	}
	p := &slowDialProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.keep(c)
			go p.pass(c, network, address, connectDelay)
		}
	}()
	return p, nil
}

// Port is where the proxy listens.
func (p *slowDialProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// pass connects client to the server after delay and copies bytes both ways until either closes.
func (p *slowDialProxy) pass(client net.Conn, network, address string, delay time.Duration) {
	time.Sleep(delay)
	server, err := net.Dial(network, address)
	if err != nil {
		client.Close()
		return
	}
	p.keep(server)
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	_, _ = io.Copy(client, server)
	client.Close()
}

func (p *slowDialProxy) keep(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

// Close stops the proxy and drops its connections.
func (p *slowDialProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
