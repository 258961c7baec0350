package connpeek

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// pair returns the two ends of a connection over network ("tcp" on the
// loopback, or "unix").
func pair(t *testing.T, network string) (client, server net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	if client, err = net.Dial(network, ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	if server = <-accepted; server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { _ = server.Close() })
	return client, server
}

// awaitPending waits until Pending(c) is true: what the peer sends or its
// close reaches the socket a moment after the peer's call returns.
func awaitPending(t *testing.T, c net.Conn) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !Pending(c); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Pending stayed false for 5s")
		}
	}
}

func TestPending(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "aix" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("the peek is Unix only")
	}
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			t.Run("quiet", func(t *testing.T) {
				client, _ := pair(t, network)
				if Pending(client) {
					t.Error("Pending of a quiet connection = true")
				}
			})
			t.Run("bytes", func(t *testing.T) {
				client, server := pair(t, network)
				if _, err := server.Write([]byte("E")); err != nil {
					t.Fatal(err)
				}
				awaitPending(t, client)
				if !Pending(client) {
					t.Error("Pending is not steady")
				}
				b := make([]byte, 2)
				if n, err := client.Read(b); err != nil || string(b[:n]) != "E" {
					t.Errorf("the peeked byte read %q, %v; want it left in place", b[:n], err)
				}
				if Pending(client) {
					t.Error("Pending once the byte was read = true")
				}
			})
			t.Run("closed by the peer", func(t *testing.T) {
				client, server := pair(t, network)
				_ = server.Close()
				awaitPending(t, client)
			})
			t.Run("closed", func(t *testing.T) {
				client, _ := pair(t, network)
				_ = client.Close()
				if !Pending(client) {
					t.Error("Pending of a closed connection = false")
				}
			})
			t.Run("tls", func(t *testing.T) { // looked at through the socket; no handshake needed
				client, server := pair(t, network)
				tc := tls.Client(client, &tls.Config{ServerName: "x"})
				if Pending(tc) {
					t.Error("Pending of a quiet *tls.Conn = true")
				}
				if _, err := server.Write([]byte{21}); err != nil {
					t.Fatal(err)
				}
				awaitPending(t, tc)
			})
		})
	}
}

// A net.Conn that is no socket is taken to be quiet: nothing is known.
func TestPendingOfNoSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Pending(a) {
		t.Error("Pending(net.Pipe) = true")
	}
}

// A read left blocked on the socket (pgconn's background reader may leave
// one on an idle connection) neither holds Pending up nor loses to it: the
// peek answers at once, and the byte it saw goes to the blocked read.
func TestPendingBesideABlockedRead(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "aix" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("the peek is Unix only")
	}
	client, server := pair(t, "tcp")
	read := make(chan string, 1)
	go func() {
		b := make([]byte, 2)
		n, _ := client.Read(b)
		read <- string(b[:n])
	}()
	for range 100 { // the read is blocked by now, or soon
		done := make(chan bool, 1)
		go func() { done <- Pending(client) }()
		select {
		case p := <-done:
			if p {
				t.Fatal("Pending of a quiet connection with a blocked read = true")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Pending waited for the blocked read")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := server.Write([]byte("N")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-read:
		if got != "N" {
			t.Errorf("the blocked read got %q, want %q", got, "N")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked read got nothing in 5s")
	}
}
