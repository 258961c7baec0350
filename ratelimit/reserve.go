package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadmit/pgadmit/db"
)

// Reserve admits a request against every limit, all or nothing: window
// limits reserve their Amount in the current window, concurrent limits take
// a lease. When any limit does not fit, nothing is written and the error is
// an *ExceededError for the first limit (in the caller's order) that did not
// fit.
//
// taskID and attemptID are optional UUIDs ("" for none). A task id lets
// Recover give the capacity back when the task's process dies.
//
// Cost: one round trip. The statements run as one pipelined transaction in
// which counter rows are locked in a global order (no deadlocks whatever
// order callers list limits in) and held only while the server executes it.
func (l *Limiter) Reserve(ctx context.Context, taskID, attemptID string, limits []Limit) (Grant, error) {
	task, err := parseOptionalID("TaskID", taskID)
	if err != nil {
		return Grant{}, err
	}
	attempt, err := parseOptionalID("AttemptID", attemptID)
	if err != nil {
		return Grant{}, err
	}
	windows, leases, err := splitLimits(limits)
	if err != nil {
		return Grant{}, err
	}
	grant := Grant{TaskID: taskID, AttemptID: attemptID}
	if len(windows) == 0 && len(leases) == 0 {
		return grant, nil
	}
	first, last := phaseCounters, phaseCounters
	if len(windows) == 0 {
		first = phaseLeaseScopes
	}
	if len(leases) > 0 {
		last = phaseLeaseScopes
	}
	if err := l.enter("Reserve", first, last); err != nil {
		return Grant{}, err
	}

	apply := db.ReserveApplyParams{TaskID: task, AttemptID: attempt}
	for _, w := range windows {
		apply.WScopeTypes = append(apply.WScopeTypes, w.Limit.Scope.Type)
		apply.WScopeKeys = append(apply.WScopeKeys, w.Limit.Scope.Key)
		apply.WMetrics = append(apply.WMetrics, w.Limit.Metric)
		apply.WWindowSeconds = append(apply.WWindowSeconds, w.windowSeconds)
		apply.WLimitValues = append(apply.WLimitValues, w.Limit.Limit)
		apply.WAmounts = append(apply.WAmounts, w.Limit.Amount)
	}
	for _, c := range leases {
		apply.CScopeTypes = append(apply.CScopeTypes, c.Limit.Scope.Type)
		apply.CScopeKeys = append(apply.CScopeKeys, c.Limit.Scope.Key)
		apply.CLimitValues = append(apply.CLimitValues, c.Limit.Limit)
		apply.CAmounts = append(apply.CAmounts, c.Limit.Amount)
		apply.CTtlSeconds = append(apply.CTtlSeconds, c.ttlSeconds)
	}

	b := &pgx.Batch{}
	if len(windows) > 0 {
		queue(b, func(r db.DBTX) {
			_ = l.queries.CounterEnsureWindows(ctx, r, db.CounterEnsureWindowsParams{
				ScopeTypes: apply.WScopeTypes, ScopeKeys: apply.WScopeKeys, Metrics: apply.WMetrics,
				WindowSeconds: apply.WWindowSeconds, LimitValues: apply.WLimitValues,
			})
		})
		queue(b, func(r db.DBTX) {
			_ = l.queries.CounterLockWindows(ctx, r, db.CounterLockWindowsParams{
				ScopeTypes: apply.WScopeTypes, ScopeKeys: apply.WScopeKeys, Metrics: apply.WMetrics,
				WindowSeconds: apply.WWindowSeconds,
			})
		})
	}
	if len(leases) > 0 {
		queue(b, func(r db.DBTX) {
			_ = l.queries.LeaseLockScopes(ctx, r, db.LeaseLockScopesParams{ScopeTypes: apply.CScopeTypes, ScopeKeys: apply.CScopeKeys})
		})
	}
	var rows []db.ReserveApplyRow
	queueRows(b, &rows, func(r db.DBTX) { _, _ = l.queries.ReserveApply(ctx, r, apply) })
	if err := runBatch(ctx, l.conn, b); err != nil {
		return Grant{}, wrapDBError("reserve", err)
	}
	if len(rows) != len(windows)+len(leases) {
		return Grant{}, fmt.Errorf("ratelimit: reserve: %d limits but %d decisions (a counter row vanished)", len(windows)+len(leases), len(rows))
	}
	if err := refusalError(rows[0].Refusal, taskID, attemptID); err != nil {
		return Grant{}, err
	}

	var refused *ExceededError
	refusedAt := len(limits)
	for _, row := range rows {
		if row.IsLease {
			c := leases[row.Ord-1]
			if !row.Fits && c.index < refusedAt {
				refused, refusedAt = leaseExceeded(c, row), c.index
			}
			if row.GrantID.Valid {
				grant.Leases = append(grant.Leases, Lease{
					ID: idString(row.GrantID), ScopeType: c.Limit.Scope.Type, ScopeKey: c.Limit.Scope.Key,
					Amount: c.Limit.Amount, Limit: c.Limit.Limit, TTL: time.Duration(c.ttlSeconds) * time.Second,
					ExpiresAt: row.ResetAt,
				})
			}
			continue
		}
		w := windows[row.Ord-1]
		if !row.Fits && w.index < refusedAt {
			refused, refusedAt = windowExceeded(w, row.UsedValue, row.ReservedValue, row.ResetAt, row.DbNow), w.index
		}
		if row.GrantID.Valid {
			grant.Reservations = append(grant.Reservations, Reservation{
				ID: idString(row.GrantID), ScopeType: w.Limit.Scope.Type, ScopeKey: w.Limit.Scope.Key,
				Metric: w.Limit.Metric, Window: time.Duration(w.windowSeconds) * time.Second,
				WindowStart: row.WindowStart, ResetAt: row.ResetAt, Limit: w.Limit.Limit, Amount: w.Limit.Amount,
			})
		}
	}
	if refused != nil {
		return Grant{}, refused
	}
	if len(grant.Reservations) != len(windows) || len(grant.Leases) != len(leases) {
		return Grant{}, fmt.Errorf("ratelimit: reserve: admitted without a grant for every limit")
	}
	return grant, nil
}

// windowExceeded explains a window limit that did not fit.
func windowExceeded(w windowLimit, used, reserved float64, resetAt, dbNow time.Time) *ExceededError {
	l := w.Limit
	current := used + reserved
	e := &ExceededError{
		ScopeType: l.Scope.Type, ScopeKey: l.Scope.Key, ScopeName: l.Scope.Name, ScopeMetadata: l.Scope.Metadata,
		Metric: l.Metric, Limit: l.Limit, Amount: l.Amount,
		Current: current, Used: used, Reserved: reserved, Projected: current + l.Amount,
		WindowSeconds: int(w.windowSeconds), ResetAt: resetAt, Policy: l.Policy,
	}
	if l.Amount > l.Limit {
		e.Message = fmt.Sprintf("rate limit exceeded: %s amount %g is greater than limit %g on %s:%s", l.Metric, l.Amount, l.Limit, l.Scope.Type, l.Scope.Key)
		return e
	}
	e.Retryable = true
	e.RetryAfter = max(resetAt.Sub(dbNow), time.Second)
	e.Message = fmt.Sprintf("rate limit exceeded: %s window of %s:%s has %g of %g left, %g needed; retry after %s",
		l.Metric, l.Scope.Type, l.Scope.Key, max(l.Limit-current, 0), l.Limit, l.Amount, e.RetryAfter.Round(time.Second))
	return e
}

// leaseExceeded explains a concurrent limit that did not fit.
func leaseExceeded(c leaseLimit, row db.ReserveApplyRow) *ExceededError {
	l := c.Limit
	e := &ExceededError{
		ScopeType: l.Scope.Type, ScopeKey: l.Scope.Key, ScopeName: l.Scope.Name, ScopeMetadata: l.Scope.Metadata,
		Metric: l.Metric, Limit: l.Limit, Amount: l.Amount,
		Current: row.UsedValue, Used: row.UsedValue, Projected: row.UsedValue + l.Amount,
		ResetAt: row.ResetAt, Policy: l.Policy,
	}
	if l.Amount > l.Limit {
		e.Message = fmt.Sprintf("rate limit exceeded: concurrent amount %g is greater than limit %g on %s:%s", l.Amount, l.Limit, l.Scope.Type, l.Scope.Key)
		return e
	}
	e.Retryable = true
	e.RetryAfter = min(max(row.ResetAt.Sub(row.DbNow), time.Second), 5*time.Second)
	e.Message = fmt.Sprintf("rate limit exceeded: concurrent active %g plus request %g is greater than limit %g on %s:%s",
		row.UsedValue, l.Amount, l.Limit, l.Scope.Type, l.Scope.Key)
	return e
}

// refusalError turns ReserveApply's precondition refusal into an error.
func refusalError(refusal, taskID, attemptID string) error {
	switch refusal {
	case "":
		return nil
	case "isolation":
		return fmt.Errorf("ratelimit: reserve: %w", ErrIsolation)
	case "unknown_task":
		return fmt.Errorf("ratelimit: reserve: task %s: %w", taskID, ErrUnknownTask)
	case "unknown_attempt":
		return fmt.Errorf("ratelimit: reserve: attempt %s of task %s: %w", attemptID, taskID, ErrUnknownTask)
	case "task_finished":
		return fmt.Errorf("ratelimit: reserve: task %s: %w", taskID, ErrTaskFinished)
	case "attempt_finished":
		return fmt.Errorf("ratelimit: reserve: attempt %s: %w", attemptID, ErrTaskFinished)
	}
	return fmt.Errorf("ratelimit: reserve: refused (%s)", refusal)
}

// wrapDBError names the operation and maps foreign-key violations (a task or
// attempt id that names no row) to ErrUnknownTask.
func wrapDBError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23503": // foreign_key_violation
			return fmt.Errorf("ratelimit: %s: %w (%s)", op, ErrUnknownTask, pgErr.ConstraintName)
		case "40001": // serialization_failure: only possible above READ COMMITTED
			return fmt.Errorf("ratelimit: %s: %w: %w", op, ErrIsolation, err)
		}
	}
	return fmt.Errorf("ratelimit: %s: %w", op, err)
}
