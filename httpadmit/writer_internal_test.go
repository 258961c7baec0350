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
// server's writer has it.
func TestWrapKeepsHijackerAndPusher(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	for _, tc := range []struct {
		w                http.ResponseWriter
		hijacker, pusher bool
	}{
		{rec, false, false},
		{bothWriter{rec}, true, true},
		{struct {
			http.ResponseWriter
			http.Hijacker
		}{rec, bothWriter{rec}}, true, false},
		{struct {
			http.ResponseWriter
			http.Pusher
		}{rec, bothWriter{rec}}, false, true},
	} {
		_, w := wrap(tc.w)
		_, hijacker := w.(http.Hijacker)
		_, pusher := w.(http.Pusher)
		if hijacker != tc.hijacker || pusher != tc.pusher {
			t.Errorf("wrap(%T): Hijacker %v, Pusher %v; want %v, %v", tc.w, hijacker, pusher, tc.hijacker, tc.pusher)
		}
	}
}
