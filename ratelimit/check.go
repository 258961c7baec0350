package ratelimit

import (
	"context"
	"fmt"
	"slices"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/plural"
)

// Check tells, without reserving anything, whether the window limits'
// current windows could take their Amounts: nil, or an *ExceededError for
// the first one that could not. It writes nothing. Concurrent limits are
// not checked (a slot is only meaningful when taken; Reserve decides them). A Local limit that a
// block this Limiter holds has room for passes without a look at its
// window, as Reserve would admit it from the block (whose units the window
// counts as reserved); any other is checked against its window. One round
// trip (none when every limit passes from a block).
//
// For window limits Check's verdict, and the figures of its refusal, are
// what Reserve would decide at that moment, with one exception: a Local
// limit that this Limiter holds a block of, with too little room left for
// the Amount, is checked against its window, which counts the block's
// unused units as reserved, while Reserve first trims that block to what
// it admitted (its unused units go back to the window) and takes a new
// block or decides in the database with them free. Check may then refuse
// an Amount that Reserve admits (one within the window's free units plus
// the block's unused ones), and a refusal of both reports less reserved
// from Reserve. Where Local is ignored (inside a caller's transaction, on
// a single connection) there is no exception.
func (l *Limiter) Check(ctx context.Context, limits []Limit) error {
	if err := l.callable(ctx); err != nil {
		return err
	}
	windows, _, err := splitLimits(limits)
	if err != nil {
		return err
	}
	if l.allot != nil {
		windows = slices.DeleteFunc(windows, func(w windowLimit) bool { return w.Limit.Local && l.allot.canTake(w) })
	}
	if len(windows) == 0 {
		return nil
	}
	var p db.CounterCheckWindowsParams
	for _, w := range windows {
		p.ScopeTypes = append(p.ScopeTypes, w.Limit.Scope.Type)
		p.ScopeKeys = append(p.ScopeKeys, w.Limit.Scope.Key)
		p.Metrics = append(p.Metrics, w.Limit.Metric)
		p.WindowSeconds = append(p.WindowSeconds, w.windowSeconds)
		p.LimitValues = append(p.LimitValues, w.Limit.Limit)
		p.Amounts = append(p.Amounts, w.Limit.Amount)
	}
	p.Now = l.opts.clock.at()
	rows, err := l.queries.CounterCheckWindows(ctx, l.conn, p)
	if err != nil {
		return wrapDBError(ctx, "check", err)
	}
	if len(rows) != len(windows) {
		return fmt.Errorf("ratelimit: check: %s but %s read", plural.Count(len(windows), "limit", "limits"), plural.Count(len(rows), "window", "windows"))
	}
	for _, row := range rows {
		w := windows[row.Ord-1]
		if !row.Fits {
			return windowExceeded(w, row.UsedValue, row.ReservedValue, row.ResetAt, row.DbNow)
		}
	}
	return nil
}
