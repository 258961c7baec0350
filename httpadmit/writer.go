package httpadmit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"syscall"
)

// responseWriter passes everything through to the server's writer and
// remembers the first error a write or a flush returned: a stream that was
// cut. A flush passes through (until a hijack; refused as without the
// middleware when the writer under it cannot flush), and Unwrap lets
// http.ResponseController reach the server's writer (deadlines, hijacking,
// full duplex).
type responseWriter struct {
	http.ResponseWriter
	err error
	// hijacked is set once the handler took the connection through this
	// writer, or a flush found it taken around it (probe); like the
	// server's writer, it is not safe for concurrent use.
	hijacked bool
	// probe is set when the connection can be taken around this writer:
	// the writer under it is another middleware's, with Unwrap but no
	// Hijack, so http.ResponseController hijacks the server's writer
	// through it and this one never knows.
	probe bool
	// flushes is set when the writer under this one can be flushed:
	// http.ResponseController finds FlushError or Flush on it or under it
	// (canFlush). When it cannot, a flush is refused as it would be
	// without the middleware, and sends nothing.
	flushes bool
	// fields are the rate-limit headers of the middleware's families
	// (canonical names) that held a value when the handler started
	// (heldFields), kept to their first value (firstValues) each time the
	// header goes out, until it went out with its final status
	// (headerOut). The others are the handler's, and are not put back
	// after a 1xx either (hinted).
	fields    []string
	headerOut bool
	// hinted holds the rate-limit headers (of fields) as they went out
	// with the first informational status, put back in a header map found
	// empty afterwards (cleared). A httputil.ReverseProxy clears the
	// whole map once it forwarded an upstream's 1xx (103 Early Hints), then
	// copies the final response's headers in: the upstream's rate-limit
	// values went out in place of the middleware's.
	hinted http.Header
}

// flushWriter, hijackWriter and pushWriter each add one method to a
// responseWriter: wrap gives the handler those that work on the writer
// under it, so that a handler that asserts http.Flusher (to stream),
// http.Hijacker (gorilla/websocket's Upgrade does) or http.Pusher finds
// one through the middleware exactly when it can use it. (Behind another
// middleware's writer with Unwrap but no Flush, over one that flushes, the
// middleware's is an http.Flusher, though that writer is not one: its
// flush works, as through http.ResponseController.)
type flushWriter struct{ *responseWriter }

// Flush sends what was written so far, as http.Flusher does.
func (w flushWriter) Flush() { _ = w.FlushError() }

type hijackWriter struct{ *responseWriter }

// Hijack hands the connection to the handler; the request is settled when
// the handler returns, as any other.
func (w hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := w.ResponseWriter.(http.Hijacker).Hijack()
	if err == nil {
		w.hijacked = true
	}
	return conn, brw, err
}

type pushWriter struct{ *responseWriter }

// Push initiates an HTTP/2 server push, as the server's writer does.
func (w pushWriter) Push(target string, opts *http.PushOptions) error {
	return w.ResponseWriter.(http.Pusher).Push(target, opts)
}

// wrap is the writer the handler gets: rw, with Flush when w can be
// flushed (canFlush), Hijack when w is an http.Hijacker, and Push when it
// is an http.Pusher.
func wrap(w http.ResponseWriter) (rw *responseWriter, forHandler http.ResponseWriter) {
	_, hijacker := w.(http.Hijacker)
	_, pusher := w.(http.Pusher)
	_, unwraps := w.(interface{ Unwrap() http.ResponseWriter })
	rw = &responseWriter{ResponseWriter: w, probe: unwraps && !hijacker, flushes: canFlush(w)}
	f, h, p := flushWriter{rw}, hijackWriter{rw}, pushWriter{rw}
	switch {
	case rw.flushes && hijacker && pusher:
		return rw, struct {
			*responseWriter
			flushWriter
			hijackWriter
			pushWriter
		}{rw, f, h, p}
	case rw.flushes && hijacker:
		return rw, struct {
			*responseWriter
			flushWriter
			hijackWriter
		}{rw, f, h}
	case rw.flushes && pusher:
		return rw, struct {
			*responseWriter
			flushWriter
			pushWriter
		}{rw, f, p}
	case hijacker && pusher:
		return rw, struct {
			*responseWriter
			hijackWriter
			pushWriter
		}{rw, h, p}
	case rw.flushes:
		return rw, f
	case hijacker:
		return rw, h
	case pusher:
		return rw, p
	}
	return rw, rw
}

// WriteHeader sends the header with status code, the rate-limit headers
// kept to the middleware's values (sending): an informational status
// (1xx but 101) sends the header too, ahead of the final one.
func (w *responseWriter) WriteHeader(code int) {
	w.sending(code >= 200 || code == http.StatusSwitchingProtocols)
	w.ResponseWriter.WriteHeader(code)
}

// Header returns the server's header map, with the rate-limit headers
// put back in if it was cleared since an informational status went out
// (cleared).
func (w *responseWriter) Header() http.Header {
	cleared := w.cleared() // before the writers around put theirs back
	h := w.ResponseWriter.Header()
	if cleared {
		for name, values := range w.hinted {
			h[name] = slices.Clone(values)
		}
	}
	return h
}

// cleared reports whether the rate-limit headers that went out with the
// first informational status (hinted) are to be put back in the header
// map: the final status has not gone out, and the map is empty. It was
// cleared (as a httputil.ReverseProxy does after forwarding a 1xx), not
// edited field by field, so what the handler adds next goes beside them,
// and one it sets replaces them, as before the 1xx. (A handler that
// deletes every field after a 1xx, one by one, gets them back too: that
// cannot be told from a clear. Deleted before the 1xx, they stay deleted.)
// The map is looked at under the writers of the middlewares around this
// one (untouchedHeader), whose Header puts their own fields back first:
// behind one that sends other families, this one's would be lost, and the
// upstream's values of them go out.
func (w *responseWriter) cleared() bool {
	return w.hinted != nil && !w.headerOut && len(untouchedHeader(w.ResponseWriter)) == 0
}

// untouchedHeader is the header map of w as the handler left it, read
// without a writer of this package putting its fields back: through the
// first such writer found under w (through Unwrap too), from under the
// outermost of them; else w's.
func untouchedHeader(w http.ResponseWriter) http.Header {
	for under := w; ; {
		if ours, ok := under.(interface{ untouchedHeader() http.Header }); ok {
			return ours.untouchedHeader()
		}
		u, ok := under.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w.Header()
		}
		under = u.Unwrap()
	}
}

// untouchedHeader is the header map under w, as the handler left it.
func (w *responseWriter) untouchedHeader() http.Header { return untouchedHeader(w.ResponseWriter) }

// sending keeps the middleware's rate-limit headers to their first value
// (firstValues) before the header goes out, unless it went out already
// with its final status; final says it goes out with it now. A write, a
// copy or a flush sends it with 200 when WriteHeader was not called. The
// first informational status keeps the values it sends (hinted).
func (w *responseWriter) sending(final bool) {
	if w.headerOut {
		return
	}
	h := w.Header()
	firstValues(h, w.fields)
	if !final && w.hinted == nil {
		w.hinted = http.Header{}
		for _, name := range w.fields {
			if v, ok := h[name]; ok {
				w.hinted[name] = slices.Clone(v)
			}
		}
	}
	w.headerOut = final
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.sending(true)
	n, err := w.ResponseWriter.Write(b)
	w.note(err)
	return n, err
}

// WriteString writes s as Write does, through the server's
// io.StringWriter when it has one (net/http's writers do), so that
// io.WriteString does not copy s into a []byte on the way; a server's
// writer without one gets the copy, as it would without the middleware.
func (w *responseWriter) WriteString(s string) (int, error) {
	sw, ok := w.ResponseWriter.(io.StringWriter)
	if !ok {
		return w.Write([]byte(s))
	}
	w.sending(true)
	n, err := sw.WriteString(s)
	w.note(err)
	return n, err
}

// ReadFrom copies src to the client, for io.Copy and http.ServeFile. A
// file or a socket goes to the server's io.ReaderFrom, which has the
// kernel copy it (sendfile, splice) as without the middleware; since the
// kernel reads and writes in one call, its failure counts as a cut
// stream, whichever side failed. Any other source is copied through
// Write, so that its own failure (an upstream's body that breaks off) is
// no cut stream: nothing failed on the way to the client. After a hijack
// the copy is refused with http.ErrHijacked, as a write is: net/http's
// HTTP/1 ReadFrom flushes the buffer it gave back at Hijack (a nil
// pointer) when the header went out before it, as a 101 written with
// WriteHeader does. Before the server's ReadFrom, which sends the header
// whatever it copies, a hijack made around this writer is looked for too
// (taken); a copy through Write needs no look: the server refuses it.
func (w *responseWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.hijacked {
		return 0, http.ErrHijacked
	}
	w.sending(true)
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok || !kernelCopies(src) {
		return io.Copy(writerOnly{w}, src)
	}
	if w.taken() {
		return 0, http.ErrHijacked
	}
	n, err := rf.ReadFrom(src)
	w.note(err)
	return n, err
}

// kernelCopies says whether the server's io.ReaderFrom may hand src to the
// kernel: a file or a connection (syscall.Conn), alone or limited.
func kernelCopies(src io.Reader) bool {
	if lr, ok := src.(*io.LimitedReader); ok {
		src = lr.R
	}
	_, ok := src.(syscall.Conn)
	return ok
}

// writerOnly hides ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

// FlushError is Flush with its error; http.ResponseController calls it.
// Over a writer that cannot flush (http.TimeoutHandler's), it returns the
// error wrapping http.ErrNotSupported that the flush returns without the
// middleware, and sends nothing: a status written afterwards goes out.
// After a hijack it is refused with http.ErrHijacked, as a write is:
// net/http's HTTP/1 writer panics there (its buffer went back to a pool at
// Hijack), and a flush at the end of a handler, whatever happened, is a
// common pattern. A hijack made around this writer is found too (taken).
func (w *responseWriter) FlushError() error {
	if !w.flushes {
		return http.NewResponseController(w.ResponseWriter).Flush()
	}
	w.sending(true) // before taken, whose probe sends the header too
	if w.taken() {
		return http.ErrHijacked
	}
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if !errors.Is(err, http.ErrNotSupported) {
		w.note(err)
	}
	return err
}

// canFlush reports whether http.ResponseController can flush w: whether
// it finds FlushError or Flush on w or under it (Unwrap), as its Flush
// looks. A writer of this package answers for the writers under it.
func canFlush(w http.ResponseWriter) bool {
	for {
		switch u := w.(type) {
		case interface{ canFlush() bool }:
			return u.canFlush()
		case interface{ FlushError() error }, http.Flusher:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = u.Unwrap()
		default:
			return false
		}
	}
}

// canFlush reports whether the writer under w can be flushed.
func (w *responseWriter) canFlush() bool { return w.flushes }

// taken reports whether the connection was hijacked: through this writer,
// or around it (probe), which a write of no bytes finds: net/http's writer
// refuses it with http.ErrHijacked after a hijack, silently; before one,
// it only sends the header (200 if none was set), as a flush or a copy
// would.
func (w *responseWriter) taken() bool {
	if !w.hijacked && w.probe {
		_, err := w.ResponseWriter.Write(nil)
		w.hijacked = errors.Is(err, http.ErrHijacked)
	}
	return w.hijacked
}

// Unwrap returns the server's writer, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *responseWriter) note(err error) {
	// A body written after a status that has none (204, 304) is refused
	// by the server before the client: the response went out whole. So is
	// a write after the handler took the connection (Hijack): what it
	// served there is its own, and nothing was cut on the way. A write
	// past the declared Content-Length (http.ErrContentLength) is no such
	// case: it is refused and the client gets a truncated answer, a cut
	// stream whatever its cause.
	if errors.Is(err, http.ErrBodyNotAllowed) || errors.Is(err, http.ErrHijacked) {
		return
	}
	if err != nil && w.err == nil {
		w.err = err
	}
}
