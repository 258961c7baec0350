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
