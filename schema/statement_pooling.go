package schema

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/db"
)

// transactionsRunBeforeGoose runs an empty transaction on pool where the version table is not
// in the session's current schema yet, which goose creates in a transaction. A proxy that pools
// by statement (PgBouncer with pool_mode = statement) refuses it by closing the connection, and
// goose tries again on that closed connection and reports only "driver: bad connection": the
// refusal is returned here instead, for withProvider to say what to change (poolerr.Wrap).
// Where the table exists, goose's first transaction is a migration's, whose refusal it returns.
func transactionsRunBeforeGoose(ctx context.Context, pool *pgxpool.Pool) error {
	present, err := db.New().VersionTableInCurrentSchema(ctx, pool, VersionTable)
	if err != nil || present {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(pgx.Tx) error { return nil })
}
