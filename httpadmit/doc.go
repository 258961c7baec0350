// Package httpadmit is pgadmit's net/http middleware: it admits each
// request against limits kept in PostgreSQL (package ratelimit) before the
// handler runs, settles it after, and tells clients where they stand in the
// headers OpenAI, Anthropic and the IETF use.
//
//	mw, err := httpadmit.New(limiter, func(r *http.Request) ([]httpadmit.Limit, error) {
//		key := apiKeyID(r) // the id of the request's authenticated API key, never the key itself
//		return []httpadmit.Limit{
//			{Limit: ratelimit.Limit{Scope: ratelimit.Scope{Type: "api_key", Key: key},
//				Metric: ratelimit.MetricRequests, Limit: 600, Amount: 1}},
//		}, nil
//	})
//	if err != nil {
//		return err // a *ratelimit.ValidationError naming the bad argument
//	}
//	http.Handle("/v1/chat/completions", mw(upstream))
//
// A scope key is no secret: pgadmit stores it in plain text, pgadmit
// inspect and doctor show it, and a shadow limit's log line and an
// ExceededError's message name it (metrics and responses never do). Key an
// API key's scope by the key's id or a digest of it (as Example does),
// never by the key itself, and only once the key is authenticated: a key
// read from a header that nothing checked gives each made-up key a quota of
// its own.
//
// # Settling a request
//
// The handler reports what the request really used with ReportUsage
// (tokens from the upstream's usage field); the middleware commits it when
// the handler returns. Reports end there: ReportUsage and Discard called
// later (from a goroutine the handler left running) return
// ErrHandlerReturned and are not charged, so a handler that streams from
// another goroutine waits for it.
//
// The request's reservation is released instead when the handler calls
// Discard (the upstream failed; a httputil.ReverseProxy does so with
// DiscardOnProxyError as its ErrorHandler, without which its 502 is
// committed), or when it ends abnormally without having reported usage:
//
//   - it panics (any panic, http.ErrAbortHandler included; the panic goes
//     on after the release), ReasonHandlerPanic, unless its client had
//     left, its deadline passed or a write failed, which give the reason
//     below (a httputil.ReverseProxy whose stream was cut panics so);
//   - its client disconnects (ReasonClientDisconnected; over HTTP/1,
//     net/http sees a client leave only once the request's body was read to
//     its end, by the LimitsFunc or the handler: one that leaves it unread
//     learns of it only from a write that fails);
//   - its context's deadline passes (ReasonRequestDeadlineExceeded:
//     http.TimeoutHandler around the middleware, a server's request
//     timeout; a TimeoutHandler inside it answers its 503 as a handler that
//     returned, and the request is committed);
//   - a write to the client fails (ReasonStreamCut;
//     ReasonRequestDeadlineExceeded when it failed on its deadline, as the
//     server's WriteTimeout cuts a long stream).
//
// When it had reported usage, that usage is committed even then: the
// upstream spent it. So a client that leaves before the handler's first
// report pays nothing, not even its request: a handler whose upstream
// charges once it starts reports as soon as the upstream took the request
// (its running total, or the requests alone, which commits the other
// metrics at their estimate), lest leaving early be a way around the
// limits; or it takes WithCommitAfterHeader(true), which commits a request
// once the handler wrote its final status (its upstream answered) however
// it ends, at the estimate for the metrics it did not report, unless it
// calls Discard.
//
// A request whose context had ended before its Reserve was sent (its
// client left while the LimitsFunc read the body, its deadline passed) is
// not reserved at all, nor served: the ErrorHandler gets ErrRequestEnded
// (the default one answers StatusClientClosedRequest, 499, or 503 for a
// deadline), the Observer no decision; one whose context ends later is
// admitted and settled as above. One with nothing to reserve (no limits,
// or none with an amount) goes to the handler whatever its context, as it
// would without the middleware.
//
// A panic in code the middleware calls for an admitted request before its
// handler runs (an Observer's method, the logger's handler on a shadow
// refusal) releases it too (ReasonHandlerPanic), and goes on. A panic in
// code the middleware calls to settle such a request (the Observer, the
// logger) does not replace the first one, which net/http is to show: it
// is logged with its stack (at most one line a second).
//
// Only what happens while the handler runs is seen: the bytes still
// buffered when it returns (by net/http, a few KB, or by a middleware
// around this one) go out after the request was settled, so a client that
// leaves then is not seen, and the request, whose upstream ran to the end,
// is committed. (A write that succeeds only says the kernel took the
// bytes, not that the client got them.) A write past the Content-Length
// the handler set (its bug: a length copied from an upstream whose body it
// changed) fails, and nothing of it is sent: the client got a truncated
// answer, and the request is released as a cut stream (ReasonStreamCut),
// unless it reported usage; HTTP/2 returns an error of its own there, not
// http.ErrContentLength. Over HTTP/2 net/http checks the length only once
// the header went out: a first write past it that the handler does not
// flush goes out whole when the handler returns, the client's read fails,
// and the middleware, which saw no failed write, commits the request.
//
// The handler's writer is an http.Flusher, http.Hijacker or http.Pusher
// when the writer under the middleware's is one: an http.Flusher when
// http.ResponseController can flush it (through another middleware's
// writer with Unwrap too), which http.TimeoutHandler's writer cannot; a
// flush through http.ResponseController is then refused with an error
// wrapping http.ErrNotSupported, as without the middleware.
//
// A handler that takes the connection (Hijack, a WebSocket upgrade) is
// settled the same way when it returns, but what happens on the connection
// is its own: a write, copy or flush of the writer afterwards is refused
// with http.ErrHijacked and cuts nothing, and the server no longer cancels
// the request's context when the client leaves. Such a session is thus
// committed unless the handler calls Discard, or panics (before or after
// the hijack) without having reported usage; one that spends as it goes
// reports its running total. A hijack through http.ResponseController
// that goes around the middleware's writer (another middleware's writer
// outside it, with Unwrap but no Hijack) is settled alike.
//
// A request behind several middlewares (one for every route, another for a
// route's own limits) has what its handler reports settle the admission of
// each; when an inner one refuses it or cannot decide it, its default
// handlers release the outer ones' admissions unless the handler reports
// usage, or another middleware inside admits the request and commits it
// (or has no limits for it and lets it through), which say an upstream ran
// after all (a custom handler calls Discard to release them whatever is
// reported).
//
// Concurrency leases are renewed while a request runs longer than a third
// of their TTL, so long streams keep their slots. A lease a renewal finds
// lost (it expired while the database was away, or was released by
// someone else) is reported once, as that renewal's failed DatabaseCall,
// and no longer renewed; the request's other leases are, and it is
// settled as any other. Nothing stays held: a
// settle that fails is logged (at most one line a second, with how many
// like it were held back) and reported to the Observer as a failed
// DatabaseCall, and what it left lapses by itself (a lease at its TTL, a
// reservation when its window ends: until then the window counts the
// request at its estimate, a Release that failed included). The middleware
// does not try a failed settle again, as the end of the response waits for
// it (see below), and when the database fails, every request's settle
// fails alike. ratelimit sends a statement once more when none of it
// reached the server, and one it sent may still be applied after the
// settle timed out (ratelimit.Limiter.Release says when).
//
// # Responses
//
// A refusal is a 429 with Retry-After (whole seconds, computed on the
// database's clock) and an application/problem+json body (RFC 9457) of type
// quota-exceeded naming the limit in violated-policies; a refusal that
// retrying cannot cure (the request needs more than the whole quota) has no
// Retry-After, and no reset on the database's clock either (no t in
// RateLimit, no x-ratelimit-reset-*, no anthropic-ratelimit-*-reset). Every response of a decided request, success, refusal or
// stream, carries the rate-limit headers, set before the handler writes a
// byte, and sent with the middleware's values alone: a value a handler adds
// to one of them (a httputil.ReverseProxy adds the upstream's headers to
// the writer's, and OpenAI and Anthropic answer with x-ratelimit-* and
// anthropic-ratelimit-* about the gateway's account with them) does not go
// out, lest a client read the field as both (Python's and JavaScript's
// header maps join them: "99000, 1999000"). A field the handler sets
// (Header().Set) replaces the middleware's, and one the middleware has no
// value for is the handler's: delete the upstream's in a ReverseProxy's
// ModifyResponse to keep them from clients. An informational status (103
// Early Hints) carries them too, and a header map cleared after it (a
// ReverseProxy clears it once it forwarded an upstream's 1xx) gets them
// back before the handler fills it for the final status, which then
// carries the middleware's values, not the upstream's (a field the
// middleware has no value for that went out with the 1xx does not come
// back: it is the handler's, cleared with the rest). Behind several
// middlewares, each gets its own back, as long as a writer of another kind
// that a middleware put between two of them has Unwrap: without it, the
// fields of the families that only the inner one sends go out with the
// upstream's values. WithHeaders picks the families:
//
//   - HeadersIETF: RateLimit-Policy and RateLimit from
//     draft-ietf-httpapi-ratelimit-headers-10, Structured Fields serialized
//     by github.com/dunglas/httpsfv (example below). The draft registers no
//     token unit, so a quota in any metric other than requests and
//     concurrent carries its unit in the vendor parameter pgadmit-qu
//     (VendorQuotaUnitParam); concurrent limits use the registered
//     qu="concurrent-requests" and have no window.
//   - HeadersOpenAI: x-ratelimit-limit-requests, x-ratelimit-remaining-requests,
//     x-ratelimit-reset-requests (1s, 6m0s) and the same for tokens.
//   - HeadersAnthropic: anthropic-ratelimit-requests-limit, -remaining and
//     -reset (RFC 3339), and the same for tokens.
//
// For an API key allowed 600 requests and 100,000 tokens a minute, 16.52
// seconds before its window ends (t rounds up):
//
//	RateLimit-Policy: "requests";q=600;w=60, "tokens";q=100000;pgadmit-qu="tokens";w=60
//	RateLimit: "requests";r=599;t=17, "tokens";r=99500;t=17
//	X-Ratelimit-Remaining-Tokens: 99500
//	X-Ratelimit-Reset-Tokens: 16.52s
//
// All values come from the decision Reserve made (Grant.DecidedAt, each
// Reservation's Limit, Remaining, Window and ResetAt; the ExceededError of
// a refusal): no second query. Only enforced limits appear. A Local limit
// admitted from this process's block has a RateLimit-Policy but no state
// (no RateLimit item, no remaining or reset header): that decision did not
// read the window, and what the block had left is not what the window has.
// A limit is named by its Policy when set, else by its metric, qualified by
// scope type and window when several limits share it; limits that would still
// have one name (the same Policy twice, as a plan's name on its requests and
// tokens limits; a Policy that is another limit's metric; names that differ
// only outside printable ASCII, which becomes '_') are told apart by their
// metric ("gold-requests", "gold-tokens"), then by scope type and window.
// When several limits count the same metric, the OpenAI and Anthropic headers
// show the one with the least left. Limits whose quota is not a whole number,
// or is ratelimit.MaxAmount (16 digits), are left out of the IETF headers (q
// is a Structured Field Integer, 15 digits at most). A
// refusal tells the state of the limit that refused only. Behind several
// middlewares (one for every route, another for a route's own limits),
// every family that one of them sends shows the limits of all of them
// that send headers (not those of one with WithHeaders(0), nor of one that
// failed open), whichever of them chose the family: an inner middleware
// sends its families and those of the ones around it. Each limit is shown
// as the middleware that applied it decided it, named apart over them all,
// and the OpenAI and Anthropic headers show the one with the least left
// among them; a counter that two of them limit is
// shown as the inner one decided it, or, when that decision did not read
// it (a zero Amount, a Local limit admitted from the block, a limit other
// than the one a refusal names), with what the outer one read, against the
// inner one's quota.
//
// # Shadow limits
//
// A limit in Shadow mode is evaluated and recorded but never refuses; a
// request it would have refused is counted (OutcomeShadowRefused) and
// logged, then served. The log gets at most one line a second per shadow
// limit (its scope, metric, window and quota), with how many of its lines
// were held back since its last (similar_lines_suppressed), so that a hot
// key refused on every request does not flood it; the Observer counts
// every refusal. Past 1,024 shadow limits logged within a second, the
// others share one line a second. Shadow limits go into the same Reserve call as the
// enforced ones, after them. Reserve is all or nothing and reports the
// first limit in that order that did not fit, so when it names a shadow
// limit, every enforced limit fit: that shadow limit is dropped and Reserve
// runs again. A request thus costs one round trip, plus one per shadow
// limit that would refuse it. Shadow limits are reserved and committed like
// enforced ones, so their counters see exactly the traffic they would see
// if enforced (what a refused request would not have added, they do not
// count either). A non-consuming Check would cost a round trip on every
// request and, writing nothing, would never see a new limit fill up.
//
// A shadow limit on an enforced limit's own counter (same scope, metric and
// window: a lower limit being tried out) cannot be reserved twice; it is
// judged from the enforced limit's decision, with no round trip of its own.
// It sees the traffic the enforced limit admits.
//
// A shadow limit that ratelimit would refuse as input (ratelimit.Limit's
// Validate: a NaN amount, a negative limit, an empty scope key), or that
// shares its counter with an earlier shadow limit that no enforced limit
// draws on (Reserve takes one limit per counter), or that would take the
// call past ratelimit.MaxLimitsPerCall, is set aside: the request
// is decided on the other limits, and a warning is logged at most once a
// second. An enforced limit invalid in what a LimitsFunc takes from the
// request (its Amount, the estimate; its Scope.Key, as an API key), or on
// the same counter as another, is a 400 naming the field, as in
// Limits[2].Amount, by the limit's index in what the LimitsFunc returned.
// One invalid in any other field (Limit, Metric, Scope.Type, Window,
// LeaseTTL, Local), or whose Mode or OnFailure is none of the defined
// values, cannot be applied to any request, nor can more enforced limits
// with an amount than one Reserve takes (ratelimit.MaxLimitsPerCall): the
// request gets an error matching ErrInvalidLimit (500 by default), nothing
// is reserved, and the error is logged at most once a second.
//
// # When the database fails
//
// A decision that errors, or that takes longer than WithDecisionTimeout
// (default 250 ms, connecting included), follows the limits' FailurePolicy:
// if any enforced limit fails closed (the default), the request is refused
// with 503 (an *UnavailableError to the error handler, OutcomeFailedClosed);
// otherwise it is admitted unrecorded (OutcomeFailedOpen), without
// rate-limit headers. A database that is down or hangs thus costs a request
// at most the decision timeout, plus up to 100 ms in which ratelimit lets a
// statement already under way finish (see ratelimit.Limiter.Reserve). A
// Reserve that timed out after the server applied it is released then;
// only one answered later than that has no owner, and lapses like any
// unsettled one, unless the pool was set up with ratelimit.ConfigurePool:
// the statement is then cancelled by a request whose answer pgx reads, and
// what it granted is released too, for about 100 ms more: the cancel's
// round trip, then a 100 ms pause before the connection is used again
// (from a frozen server, the connection is given up after 1 s, at most
// 1.25 s). Bound
// connection attempts too (connect_timeout in the pool's configuration),
// so that background dials to a hanging server end.
//
// A database that hangs after a request was admitted costs it the settle
// instead: net/http sends the bytes it still buffers, and ends the
// response, only once the middleware returns, after the Commit or Release,
// so the end of the response waits for WithSettleTimeout (default 2 s),
// and for up to that again when a renewal of the request's leases is under
// way. What the handler flushed has been sent already.
//
// # Metrics
//
// WithObserver receives every decision (LimitOutcome per limit), the
// latency of every database call, and the leases requests in flight hold.
// Package promadmit turns them into Prometheus metrics.
package httpadmit
