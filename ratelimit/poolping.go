package ratelimit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/internal/connpeek"
)

// idlePingAfter is pgxpool's own rule, kept when the caller set no
// ShouldPing: a connection idle for longer is pinged.
const idlePingAfter = time.Second

// pingEnded returns a pgxpool ShouldPing that pings a connection when
// shouldPing does (pgxpool's idle rule when it is nil), and also when its
// socket already has something to read or is closed (connpeek.Pending):
// the server ended the session (see ConfigurePool), and the failed ping
// makes pgxpool replace the connection before a statement is sent on it.
//
// The price is one non-blocking recvfrom(2) per acquire of a connection
// not pinged anyway, on the path of every statement: measured on a busy
// 2-core machine (Linux), the peek took 0.5-0.7 us and 3 small
// allocations, and taking an idle connection and giving it back went from
// 0.4-0.6 us to 1.3-1.7 us, against 27-130 us for the round trip of an
// empty statement to a local server.
func pingEnded(shouldPing func(context.Context, pgxpool.ShouldPingParams) bool) func(context.Context, pgxpool.ShouldPingParams) bool {
	return func(ctx context.Context, p pgxpool.ShouldPingParams) bool {
		if shouldPing != nil {
			if shouldPing(ctx, p) {
				return true
			}
		} else if p.IdleDuration > idlePingAfter {
			return true
		}
		return p.Conn != nil && connpeek.Pending(p.Conn.PgConn().Conn())
	}
}
