package ratelimit

import (
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/plural"
)

// admission is one validated request for capacity: the limits of one
// Reserve call, split by kind.
type admission struct {
	taskID, attemptID string
	task, attempt     pgtype.UUID
	windows           []windowLimit // in the caller's order
	leases            []leaseLimit
	// wFirst and cFirst are the 0-based positions of the admission's first
	// window and concurrency limit in the call it was appended to; wSent
	// lists its windows (indexes into windows) in the order they were sent.
	wFirst, cFirst int
	wSent          []int
}

func newAdmission(taskID, attemptID string, limits []Limit) (admission, error) {
	task, err := parseOptionalID("TaskID", taskID)
	if err != nil {
		return admission{}, err
	}
	attempt, err := parseOptionalID("AttemptID", attemptID)
	if err != nil {
		return admission{}, err
	}
	if attempt.Valid && !task.Valid {
		// FinishTask and recovery find a task's rows by its id: rows that
		// named the attempt alone stayed open when the task finished.
		return admission{}, &ValidationError{Field: "TaskID", Value: shown(taskID), Reason: "must name the attempt's task when an attempt id is given"}
	}
	windows, leases, err := splitLimits(limits)
	if err != nil {
		return admission{}, err
	}
	return admission{taskID: taskID, attemptID: attemptID, task: task, attempt: attempt, windows: windows, leases: leases}, nil
}

// empty reports an admission with nothing to reserve (every Amount zero).
func (a *admission) empty() bool { return len(a.windows) == 0 && len(a.leases) == 0 }

// lockPhases is the span of the lock order the admission takes locks in.
func (a *admission) lockPhases() (first, last lockPhase) {
	first, last = phaseCounters, phaseCounters
	if len(a.windows) == 0 {
		first = phaseLeaseScopes
	}
	if len(a.leases) > 0 {
		last = phaseLeaseScopes
	}
	return first, last
}

// appendTo adds a to a call of pgadmit_reserve as its next admission.
func (a *admission) appendTo(p *db.AdmissionReserveParams) {
	p.TaskIds = append(p.TaskIds, a.task)
	p.AttemptIds = append(p.AttemptIds, a.attempt)
	n := int32(len(p.TaskIds))
	a.wFirst, a.cFirst = len(p.WAdmission), len(p.CAdmission)
	a.wSent = lockOrder(a.windows)
	for _, i := range a.wSent {
		w := a.windows[i]
		p.WAdmission = append(p.WAdmission, n)
		p.WScopeTypes = append(p.WScopeTypes, w.Limit.Scope.Type)
		p.WScopeKeys = append(p.WScopeKeys, w.Limit.Scope.Key)
		p.WMetrics = append(p.WMetrics, w.Limit.Metric)
		p.WWindowSeconds = append(p.WWindowSeconds, w.windowSeconds)
		p.WLimitValues = append(p.WLimitValues, w.Limit.Limit)
		p.WAmounts = append(p.WAmounts, w.Limit.Amount)
	}
	for _, c := range a.leases {
		p.CAdmission = append(p.CAdmission, n)
		p.CScopeTypes = append(p.CScopeTypes, c.Limit.Scope.Type)
		p.CScopeKeys = append(p.CScopeKeys, c.Limit.Scope.Key)
		p.CLimitValues = append(p.CLimitValues, c.Limit.Limit)
		p.CAmounts = append(p.CAmounts, c.Limit.Amount)
		p.CTtlSeconds = append(p.CTtlSeconds, c.ttlSeconds)
	}
}

// notOneWindow reports an admission that pgadmit_reserve_windows cannot
// take: more or fewer than one window limit, a concurrent limit, or a task.
func (a *admission) notOneWindow() bool {
	return len(a.windows) != 1 || len(a.leases) != 0 || a.task.Valid || a.attempt.Valid
}

// appendWindowTo adds a, an admission of one window limit, to a call of
// pgadmit_reserve_windows as its next admission.
func (a *admission) appendWindowTo(p *db.AdmissionReserveWindowsParams) {
	a.sentAsWindow(len(p.ScopeTypes))
	w := a.windows[0]
	p.ScopeTypes = append(p.ScopeTypes, w.Limit.Scope.Type)
	p.ScopeKeys = append(p.ScopeKeys, w.Limit.Scope.Key)
	p.Metrics = append(p.Metrics, w.Limit.Metric)
	p.WindowSeconds = append(p.WindowSeconds, w.windowSeconds)
	p.LimitValues = append(p.LimitValues, w.Limit.Limit)
	p.Amounts = append(p.Amounts, w.Limit.Amount)
}

// sentAsWindow records that a's one window limit went at 0-based position
// pos of its call.
func (a *admission) sentAsWindow(pos int) {
	a.wFirst, a.cFirst, a.wSent = pos, 0, []int{0}
}

// decide turns the database's decision rows of this admission (one per
// limit, Ord counting in the whole call) into a Grant, or the error that
// explains the refusal.
func (a *admission) decide(rows []db.AdmissionReserveRow) (Grant, error) {
	if len(rows) != len(a.windows)+len(a.leases) {
		return Grant{}, fmt.Errorf("ratelimit: reserve: %s but %s", plural.Count(len(a.windows)+len(a.leases), "limit", "limits"),
			plural.Count(len(rows), "decision", "decisions"))
	}
	if err := refusalError(rows[0].Refusal, a.taskID, a.attemptID); err != nil {
		return Grant{}, err
	}
	grant := Grant{TaskID: a.taskID, AttemptID: a.attemptID, DecidedAt: rows[0].DbNow,
		Reservations: make([]Reservation, len(a.windows)), Leases: make([]Lease, len(a.leases))}
	granted := 0
	var refused *ExceededError
	refusedAt := -1
	refuse := func(e *ExceededError, index int) {
		if refused == nil || index < refusedAt {
			refused, refusedAt = e, index
		}
	}
	for _, row := range rows {
		if row.IsLease {
			i := int(row.Ord) - 1 - a.cFirst
			c := a.leases[i]
			if !row.Fits {
				refuse(leaseExceeded(c, row), c.index)
			}
			if row.GrantID.Valid {
				granted++
				grant.Leases[i] = Lease{
					ID: idString(row.GrantID), ScopeType: c.Limit.Scope.Type, ScopeKey: c.Limit.Scope.Key,
					Amount: c.Limit.Amount, Limit: c.Limit.Limit, TTL: time.Duration(c.ttlSeconds) * time.Second,
					ExpiresAt: row.ResetAt, Remaining: remaining(c.Limit.Limit, row.CurrentValue, 0, c.Limit.Amount),
				}
			}
			continue
		}
		i := a.wSent[int(row.Ord)-1-a.wFirst]
		w := a.windows[i]
		if !row.Fits {
			refuse(windowExceeded(w, row.CurrentValue, row.ReservedValue, row.ResetAt, row.DbNow), w.index)
		}
		if row.GrantID.Valid {
			granted++
			grant.Reservations[i] = Reservation{
				ID: idString(row.GrantID), ScopeType: w.Limit.Scope.Type, ScopeKey: w.Limit.Scope.Key,
				Metric: w.Limit.Metric, Window: time.Duration(w.windowSeconds) * time.Second,
				WindowStart: row.WindowStart, ResetAt: row.ResetAt, Limit: w.Limit.Limit, Amount: w.Limit.Amount,
				Remaining: remaining(w.Limit.Limit, row.CurrentValue, row.ReservedValue, w.Limit.Amount),
				index:     w.index,
			}
		}
	}
	if refused != nil {
		return Grant{}, refused
	}
	if granted != len(a.windows)+len(a.leases) {
		return Grant{}, fmt.Errorf("ratelimit: reserve: admitted without a grant for every limit")
	}
	return grant, nil
}

// lockOrder returns the indexes of windows sorted in the lock order of
// their counters: scope type, scope key and metric in byte order, then
// window length. pgadmit_reserve takes limits that come in this order
// without sorting them itself.
func lockOrder(windows []windowLimit) []int {
	order := make([]int, len(windows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return windows[i].counter().compare(windows[j].counter()) })
	return order
}

// counter names the counter the limit draws on.
func (w windowLimit) counter() counterKey {
	return counterKey{w.Limit.Scope.Type, w.Limit.Scope.Key, w.Limit.Metric, w.windowSeconds}
}

// scopeKey names the concurrency scope a lease limit takes a slot of, as a
// key that no window counter has (no window limit has the metric
// "concurrent"), so that sharesCounter can tell it apart from them.
func (c leaseLimit) scopeKey() counterKey {
	return counterKey{scopeType: c.Limit.Scope.Type, scopeKey: c.Limit.Scope.Key, metric: MetricConcurrent}
}
