package httpadmit

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// bothWriter is a server's writer that can be hijacked and push, as none
// of net/http's is.
type bothWriter struct{ *httptest.ResponseRecorder }

func (bothWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, http.ErrNotSupported
}
func (bothWriter) Push(string, *http.PushOptions) error { return http.ErrNotSupported }

// wrap keeps each of http.Hijacker and http.Pusher exactly when the
// server's writer has it, and http.Flusher when it can be flushed.
func TestWrapKeepsHijackerPusherAndFlusher(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder() // an http.Flusher
	both := bothWriter{rec}
	for _, tc := range []struct {
		w                         http.ResponseWriter
		hijacker, pusher, flusher bool
	}{
		{rec, false, false, true},
		{both, true, true, true},
		{struct {
			http.ResponseWriter
			http.Hijacker
			http.Flusher
		}{rec, both, rec}, true, false, true},
		{struct {
			http.ResponseWriter
			http.Pusher
			http.Flusher
		}{rec, both, rec}, false, true, true},
		{struct{ http.ResponseWriter }{rec}, false, false, false},
		{struct {
			http.ResponseWriter
			http.Hijacker
			http.Pusher
		}{rec, both, both}, true, true, false},
		{struct {
			http.ResponseWriter
			http.Hijacker
		}{rec, both}, true, false, false},
		{struct {
			http.ResponseWriter
			http.Pusher
		}{rec, both}, false, true, false},
	} {
		_, w := wrap(tc.w)
		_, hijacker := w.(http.Hijacker)
		_, pusher := w.(http.Pusher)
		_, flusher := w.(http.Flusher)
		if hijacker != tc.hijacker || pusher != tc.pusher || flusher != tc.flusher {
			t.Errorf("wrap(%T): Hijacker %v, Pusher %v, Flusher %v; want %v, %v, %v",
				tc.w, hijacker, pusher, flusher, tc.hijacker, tc.pusher, tc.flusher)
		}
	}
}
