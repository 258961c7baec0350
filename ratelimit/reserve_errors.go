package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/amounttext"
	"github.com/pgadmit/pgadmit/internal/decimal"
	"github.com/pgadmit/pgadmit/internal/poolerr"
	"github.com/pgadmit/pgadmit/internal/textcell"
)

// windowExceeded explains a window limit that did not fit. Its message
// shows the metric and the scope as Doctor and inspect do (textcell): a
// space or a newline of them must not split the caller's log line.
func windowExceeded(w windowLimit, used, reserved float64, resetAt, dbNow time.Time) *ExceededError {
	l := w.Limit
	current := decimal.Of(used).Plus(decimal.Of(reserved)) // numeric's sum: 0.1 + 0.2 is 0.3
	e := &ExceededError{
		ScopeType: l.Scope.Type, ScopeKey: l.Scope.Key, ScopeName: l.Scope.Name, ScopeMetadata: l.Scope.Metadata,
		Metric: l.Metric, Limit: l.Limit, Amount: l.Amount,
		Current: current.Approx(), Used: used, Reserved: reserved, Projected: current.Plus(decimal.Of(l.Amount)).Approx(),
		WindowSeconds: int(w.windowSeconds), ResetAt: resetAt, Policy: l.Policy,
	}
	if l.Amount > l.Limit {
		e.Message = fmt.Sprintf("rate limit exceeded: %s amount %s is greater than limit %s on %s", textcell.Show(l.Metric),
			amounttext.Full(l.Amount), amounttext.Full(l.Limit), l.Scope.text())
		return e
	}
	e.Retryable = true
	e.RetryAfter = max(resetAt.Sub(dbNow), time.Second)
	e.Message = fmt.Sprintf("rate limit exceeded: %s window of %s has %s of %s left, %s needed; retry after %s",
		textcell.Show(l.Metric), l.Scope.text(), e.RemainingText(), amounttext.Full(l.Limit),
		amounttext.Full(l.Amount), e.RetryAfter.Round(time.Second))
	return e
}

// leaseExceeded explains a concurrent limit that did not fit.
func leaseExceeded(c leaseLimit, row db.AdmissionReserveRow) *ExceededError {
	l := c.Limit
	active := row.CurrentValue
	e := &ExceededError{
		ScopeType: l.Scope.Type, ScopeKey: l.Scope.Key, ScopeName: l.Scope.Name, ScopeMetadata: l.Scope.Metadata,
		Metric: l.Metric, Limit: l.Limit, Amount: l.Amount,
		Current: active, Used: active, Projected: decimal.Of(active).Plus(decimal.Of(l.Amount)).Approx(),
		ResetAt: row.ResetAt, Policy: l.Policy,
	}
	if l.Amount > l.Limit {
		e.Message = fmt.Sprintf("rate limit exceeded: concurrent amount %s is greater than limit %s on %s",
			amounttext.Full(l.Amount), amounttext.Full(l.Limit), l.Scope.text())
		return e
	}
	e.Retryable = true
	e.RetryAfter = min(max(row.ResetAt.Sub(row.DbNow), time.Second), 5*time.Second)
	e.Message = fmt.Sprintf("rate limit exceeded: concurrent active %s plus request %s is greater than limit %s on %s",
		amounttext.Full(active), amounttext.Full(l.Amount), amounttext.Full(l.Limit), l.Scope.text())
	return e
}

// refusalError turns pgadmit_reserve's precondition refusal into an error.
func refusalError(refusal, taskID, attemptID string) error {
	switch refusal {
	case "":
		return nil
	case "isolation":
		return errorf("ratelimit: reserve: %w", ErrIsolation)
	case "unknown_task":
		return errorf("ratelimit: reserve: task %s: %w", taskID, ErrUnknownTask)
	case "unknown_attempt":
		return errorf("ratelimit: reserve: attempt %s of task %s: %w", attemptID, taskID, ErrUnknownTask)
	case "task_finished":
		return errorf("ratelimit: reserve: task %s: %w", taskID, ErrTaskFinished)
	case "attempt_finished":
		return errorf("ratelimit: reserve: attempt %s: %w", attemptID, ErrTaskFinished)
	}
	return fmt.Errorf("ratelimit: reserve: refused (%s)", refusal)
}

// sqlstateTaskFinished is raised by pgadmit_task_recheck: the task of an
// admission finished while the admission was decided (a FinishTask that
// it waited for), and the statement was rolled back. A combined batch
// that meets it is run again one request at a time (rejectedInput), and
// the request for the finished task is then refused by the task check.
const sqlstateTaskFinished = "P0T01"

// wrapDBError names the operation and maps foreign-key violations (a task or
// attempt id that names no row) to ErrUnknownTask, an admission whose task
// finished while it was decided to ErrTaskFinished, and the errors of pgx's
// statement cache behind a transaction pooler, and a statement-pooling
// proxy refusing a transaction, to a *PoolerError. A statement the server
// cancelled because ctx ended (57014, on a pool set up with ConfigurePool)
// also matches ctx's error, as with pgx's default, which gives up the
// connection instead. The
// server's error stays in the chain: the combiner reads its code
// (rejectedInput) to tell a batch that one request's input broke, run
// again one request at a time, from one that failed for all of them.
func wrapDBError(ctx context.Context, op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57014": // query_canceled: by ctx's cancel request, or by a statement_timeout
			if cerr := ctx.Err(); cerr != nil {
				return errorf("ratelimit: %s: %w: %w", op, cerr, err)
			}
		case "23503": // foreign_key_violation
			return errorf("ratelimit: %s: %w (%s): %w", op, ErrUnknownTask, pgErr.ConstraintName, err)
		case "40001": // serialization_failure: only possible above READ COMMITTED
			return errorf("ratelimit: %s: %w: %w", op, ErrIsolation, err)
		case sqlstateTaskFinished:
			return errorf("ratelimit: %s: %w: %w", op, ErrTaskFinished, err)
		case "26000", "42P05": // invalid_sql_statement_name, duplicate_prepared_statement
			if poolerr.StatementCacheLost(err) {
				return &PoolerError{Mode: "cache_statement", Cause: err, op: op}
			}
		case "08P01": // protocol_violation: a statement-pooling proxy refusing a transaction block
			if poolerr.StatementPooling(err) {
				return &PoolerError{StatementPooling: true, Cause: err, op: op}
			}
		}
	}
	if strings.HasPrefix(err.Error(), errPrefix+op+": ") { // a *LockWaitError names its job and step itself
		return err
	}
	return errorf("ratelimit: %s: %w", op, err)
}
