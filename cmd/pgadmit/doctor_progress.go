package main

import (
	"context"
	"fmt"
	"io"
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

// doctorProgress says on out, every interval until the returned stop is called, that doctor's
// check in pctx (passContext of ctx) is still running, for how long, and what bounds it
// (passBound), as recover and prune say how far they have got: the check is one statement, with
// nothing to count until it ends, but an operator watching its scan of a large database sees
// that it has not hung, and when --pass-timeout cuts it off. Once pctx ended (--pass-timeout or
// an interrupt), it says that the check is ending, as recover and prune do: on a server that
// stopped answering, its statement's cancel waits a second for an answer. 0 says nothing. stop
// returns once nothing more is written.
func doctorProgress(ctx, pctx context.Context, out io.Writer, every, passTimeout time.Duration) (stop func()) {
	return stillRunning(every, func(elapsed time.Duration) {
		if pctx.Err() != nil {
			fmt.Fprintf(out, "pgadmit doctor: so far (%s): %s: still ending (cancelling its statement)\n",
				elapsed.Round(time.Second), endedBy(ctx, passTimeout))
			return
		}
		fmt.Fprintf(out, "pgadmit doctor: so far (%s): still checking the books (one statement over one snapshot: it reports when it ends; %s)\n",
			elapsed.Round(time.Second), passBound(pctx, passTimeout))
	})
}
