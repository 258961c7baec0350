package httpadmit

import "net/http"

// ReasonUpstreamError releases a request whose httputil.ReverseProxy could
// not get an answer from its upstream (DiscardOnProxyError).
const ReasonUpstreamError = "upstream_error"

// DiscardOnProxyError returns the ErrorHandler of a httputil.ReverseProxy
// behind the middleware (its field, not this package's ErrorHandler), so
// that a request its upstream did not serve is released, not charged:
//
//	proxy := httputil.NewSingleHostReverseProxy(upstreamURL)
//	proxy.ErrorHandler = httpadmit.DiscardOnProxyError(nil)
//	http.Handle("/v1/", admit(proxy))
//
// A ReverseProxy calls its ErrorHandler when the upstream could not be
// reached or did not answer (a transport error: refused, reset, timed out,
// the client gone), or when ModifyResponse returned an error, and then
// returns normally: without this, the middleware commits the request like
// any that its handler served. The handler returned Discards the request
// (ReasonUpstreamError), then calls h, or answers 502 Bad Gateway as
// ReverseProxy's own ErrorHandler does (without its log line) when h is
// nil. A request whose client left is released either way; with this, its
// reason is ReasonUpstreamError, not ReasonClientDisconnected: the proxy's
// error does not tell the client's end from a timeout of the gateway's own
// for the upstream call. A ModifyResponse that refuses an answer the
// upstream charged for should report the usage and return nil, not an
// error.
//
// An upstream that answers with an error status (a 500, a 503) is a
// response the proxy passes on, not an error: to release those too,
// Discard them in ModifyResponse, whose res.Request carries the
// request's context (as the example does). A stream the proxy fails to
// copy to the client ends in a panic (http.ErrAbortHandler), which the
// middleware releases unless usage was reported: as
// ReasonClientDisconnected when its client left (or for the cause that
// ended it: a deadline, a write that failed), as ReasonHandlerPanic when
// the upstream broke off. So a client that leaves mid-stream would pay
// nothing for an answer the upstream charged for: report usage in
// ModifyResponse once the upstream took the request (the requests alone
// commit the other metrics at their estimate), as the example does.
func DiscardOnProxyError(h func(http.ResponseWriter, *http.Request, error)) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if r != nil {
			// ErrNoAdmission outside the middleware: there is nothing to release.
			_ = Discard(r.Context(), ReasonUpstreamError)
		}
		if h != nil {
			h(w, r, err)
			return
		}
		w.WriteHeader(http.StatusBadGateway)
	}
}
