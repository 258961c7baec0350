package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/pgadmit/pgadmit/db"
	"github.com/pgadmit/pgadmit/internal/amounttext"
)

// AppendEvent appends e to the log of a running task and returns it as
// TaskEvents reads it back: with its sequence number and time, and its
// Payload as jsonb stores it. It is fenced by the execution token, as
// HeartbeatTask is: when the token no longer owns the task (recovery
// reclaimed it, it was claimed again, or it finished) the error is a
// *StaleTokenError (errors.Is ErrStaleToken), nothing is appended and the
// worker must stop. Sequence numbers are allocated under the task row's
// lock: unique and without gaps whatever the concurrency. e.Type is
// required; Seq and CreatedAt are ignored. ErrUnknownTask when no task has
// that id. One round trip.
//
// A retry is not idempotent: when AppendEvent fails after its statement
// was sent (its context ended, the connection broke), the event may have
// been appended all the same, and a retry appends it again, with the next
// sequence number. Where a duplicate matters, read the task's last events
// (TaskEvents) before retrying, or give the event an id of your own in its
// payload.
func (l *Limiter) AppendEvent(ctx context.Context, taskID, token string, e Event) (Event, error) {
	if err := l.callable(ctx); err != nil {
		return Event{}, err
	}
	id, err := parseID("taskID", taskID)
	if err != nil {
		return Event{}, err
	}
	tok, err := parseID("token", token)
	if err != nil {
		return Event{}, err
	}
	if err := validateText("Event.Type", e.Type); err != nil {
		return Event{}, err
	}
	for _, f := range []struct{ field, value string }{
		{"Event.Status", e.Status}, {"Event.Phase", e.Phase}, {"Event.PlatformID", e.PlatformID},
	} {
		if err := validateOptionalText(f.field, f.value, maxTaskTextBytes); err != nil {
			return Event{}, err
		}
	}
	if err := validateOptionalText("Event.Message", e.Message, maxMessageBytes); err != nil {
		return Event{}, err
	}
	if p := math.Abs(e.Progress); math.IsNaN(p) || math.IsInf(p, 0) || p > MaxAmount || (p > 0 && p < MinAmount) {
		return Event{}, &ValidationError{Field: "Event.Progress", Value: e.Progress,
			Reason: "must be zero or a finite number of magnitude " + amounttext.Full(MinAmount) + " to " + amounttext.Full(MaxAmount)}
	}
	payload, err := jsonOrEmptyObject("Event.Payload", e.Payload)
	if err != nil {
		return Event{}, err
	}
	if err := l.enter("AppendEvent", phaseRows, phaseRows); err != nil {
		return Event{}, err
	}
	row, err := l.queries.EventAppend(ctx, l.conn, db.EventAppendParams{
		TaskID: id, Token: tok, EventType: e.Type, Status: optText(e.Status), Phase: optText(e.Phase), Progress: e.Progress,
		Message: optText(e.Message), Payload: string(payload), Simulated: e.Simulated, PlatformID: optText(e.PlatformID),
		Now: l.opts.clock.at(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, errorf("ratelimit: append event to task %s: %w", taskID, ErrUnknownTask)
	}
	if err != nil {
		return Event{}, wrapDBError(ctx, "append event", err)
	}
	if !row.Seq.Valid {
		return Event{}, staleToken(taskID, row.Status)
	}
	e.Seq, e.CreatedAt, e.Payload = int(row.Seq.Int32), *row.CreatedAt, rawJSON(row.Payload)
	return e, nil
}

// eventPage is how many events TaskEvents reads per round trip.
const eventPage = 1000

// TaskEvents returns the task's events in sequence order; ErrUnknownTask
// when no task has that id.
func (l *Limiter) TaskEvents(ctx context.Context, taskID string) ([]Event, error) {
	if err := l.callable(ctx); err != nil {
		return nil, err
	}
	id, err := parseID("taskID", taskID)
	if err != nil {
		return nil, err
	}
	var out []Event
	after := int32(0)
	for {
		rows, err := l.queries.EventListByTask(ctx, l.conn, db.EventListByTaskParams{TaskID: id, AfterSeq: after, MaxRows: eventPage})
		if err != nil {
			return nil, wrapDBError(ctx, "list events", err)
		}
		for _, r := range rows {
			out = append(out, Event{
				Seq: int(r.Seq), Type: r.EventType, Status: r.Status.String, Phase: r.Phase.String, Progress: r.Progress,
				Message: r.Message.String, Payload: json.RawMessage(r.Payload), Simulated: r.Simulated,
				PlatformID: r.PlatformID.String, CreatedAt: r.CreatedAt,
			})
			after = r.Seq
		}
		if len(rows) < eventPage {
			if len(out) == 0 { // no task, or one whose events were pruned
				if err := l.knownTask(ctx, "list events of task", taskID, id); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
	}
}
