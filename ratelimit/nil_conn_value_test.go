package ratelimit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The refusal of a nil connection names what it was given: an Executor of
// one's own that embeds a nil pool, connection or transaction is not nil
// itself, and its message read "invalid conn (<nil>)", as of a nil one. A
// nil one still reads "(<nil>)", which names the nil passed.
func TestNilConnRefusalNamesWhatItFound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		l    *ratelimit.Limiter
		want string // a part of the message
	}{
		{"New(nil)", ratelimit.New(nil), "invalid conn (<nil>)"},
		{"New(nil pool)", ratelimit.New((*pgxpool.Pool)(nil)), "invalid conn (<nil>)"},
		{"New(nil *ownPool)", ratelimit.New((*ownPool)(nil)), "invalid conn (<nil>)"},
		{"New(own nil pool)", ratelimit.New(ownPool{}), "invalid conn (ratelimit_test.ownPool embedding a nil *pgxpool.Pool)"},
		{"New(&own nil pool)", ratelimit.New(&ownPool{}), "invalid conn (*ratelimit_test.ownPool embedding a nil *pgxpool.Pool)"},
		{"New(own nil conn)", ratelimit.New(ownConn{}), "invalid conn (ratelimit_test.ownConn embedding a nil *pgx.Conn)"},
		{"New(own nil pool conn)", ratelimit.New(struct{ *pgxpool.Conn }{}), "invalid conn (struct { *pgxpool.Conn } embedding a nil *pgxpool.Conn)"},
		{"New(own nil Executor)", ratelimit.New(struct{ ratelimit.Executor }{}), "invalid conn (struct { ratelimit.Executor } embedding a nil ratelimit.Executor)"},
		{"New(own, nested, nil pool)", ratelimit.New(struct{ ownPool }{}), "invalid conn (struct { ratelimit_test.ownPool } embedding a nil *pgxpool.Pool)"},
		{"WithTx(nil)", ratelimit.New(nil).WithTx(nil), "invalid tx (<nil>)"},
		{"WithTx(own nil tx)", ratelimit.New(nil).WithTx(struct{ pgx.Tx }{}), "invalid tx (struct { pgx.Tx } embedding a nil pgx.Tx)"},
	} {
		t.Cleanup(tc.l.Close)
		err := tc.l.Check(ctx, []ratelimit.Limit{window("api_key", "k", "requests", 10, 1)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Check: %v, want %q in it", tc.name, err, tc.want)
		}
	}
}
