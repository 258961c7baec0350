package main

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/pgadmit/pgadmit/internal/ticking"
)

// stillRunning calls say every interval until the returned stop is called, with the time since
// it was started: how doctor says that its check is still running, and recover and prune that
// they still wait for a batch (runProgress), so that an operator watching a run with nothing to
// count until a statement ends sees that it has not hung. 0 says nothing. stop returns once say
// no longer runs.
func stillRunning(every time.Duration, say func(elapsed time.Duration)) (stop func()) {
	if every == 0 {
		return func() {}
	}
	start := time.Now()
	return ticking.Every(every, func() { say(time.Since(start)) })
}

// doctorProgress says on out, every interval until the returned stop is called, that doctor is
// still checking, for how long, and what bounds it (passBound), as recover and prune say how far
// they have got: first the connection (CheckPooler: its probes may each wait 2 s for a session
// behind a proxy that queues them, 10 s or more in all), then, once books is called, the books
// (one statement, with nothing to count until it ends, but an operator watching its scan of a
// large database sees that it has not hung, and when --pass-timeout cuts it off). It said
// nothing during the connection's check. Once pctx (passContext of ctx) ended (--pass-timeout or
// an interrupt), it says that the check is ending, as recover and prune do: on a server that
// stopped answering, its statement's cancel waits a second for an answer. 0 says nothing. stop
// returns once nothing more is written.
func doctorProgress(ctx, pctx context.Context, out io.Writer, every, passTimeout time.Duration) (books, stop func()) {
	var onBooks atomic.Bool
	stop = stillRunning(every, func(elapsed time.Duration) {
		if pctx.Err() != nil {
			fmt.Fprintf(out, "pgadmit doctor: so far (%s): %s: still ending (cancelling its statement)\n",
				elapsed.Round(time.Second), endedBy(ctx, passTimeout))
			return
		}
		what := "the connection (whether a pooler in between keeps its server session"
		if onBooks.Load() {
			what = "the books (one statement over one snapshot"
		}
		fmt.Fprintf(out, "pgadmit doctor: so far (%s): still checking %s: it reports when it ends; %s)\n",
			elapsed.Round(time.Second), what, passBound(pctx, passTimeout))
	})
	return func() { onBooks.Store(true) }, stop
}
