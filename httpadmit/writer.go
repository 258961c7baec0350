package httpadmit

import (
	"errors"
	"net/http"
)

// responseWriter passes everything through to the server's writer and
// remembers the first error a write or a flush returned: a stream that was
// cut. Flush passes through, and Unwrap lets http.ResponseController reach
// the server's writer (deadlines, hijacking, full duplex).
type responseWriter struct {
	http.ResponseWriter
	err error
}

func (w *responseWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.note(err)
	return n, err
}

// Flush sends what was written so far, as http.Flusher does.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error; http.ResponseController calls it.
func (w *responseWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if !errors.Is(err, http.ErrNotSupported) {
		w.note(err)
	}
	return err
}

// Unwrap returns the server's writer, for http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *responseWriter) note(err error) {
	// A body written after a status that has none (204, 304) is refused
	// by the server before the client: the response went out whole.
	if errors.Is(err, http.ErrBodyNotAllowed) {
		return
	}
	if err != nil && w.err == nil {
		w.err = err
	}
}
