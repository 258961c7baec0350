package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// server is an HTTP server that serves until Close: demo --http's gateway and fake upstream, and
// recover --every --http's /metrics.
type server struct {
	url string // http://HOST:PORT, the address it listens on (its port, when 0 was asked, the one it got)
	srv *http.Server
}

// serve serves h on 127.0.0.1 at a free port.
func serve(h http.Handler) (*server, error) { return serveOn("127.0.0.1:0", h) }

// serveOn serves h on addr, HOST:PORT (":PORT": every interface; port 0: a free one). It fails
// when addr cannot be bound, before it serves anything.
func serveOn(addr string, h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &server{url: "http://" + ln.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server, waiting briefly for requests in flight.
func (s *server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); errors.Is(err, context.DeadlineExceeded) {
		_ = s.srv.Close()
	}
}

// metricsPage is the Prometheus page of reg's metrics, what GET /metrics serves.
func metricsPage(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
