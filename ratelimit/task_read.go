package ratelimit

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgadmit/pgadmit/db"
)

// GetTask reads one task; ErrUnknownTask when no task has that id.
func (l *Limiter) GetTask(ctx context.Context, taskID string) (Task, error) {
	if err := l.callable(ctx); err != nil {
		return Task{}, err
	}
	id, err := parseID("taskID", taskID)
	if err != nil {
		return Task{}, err
	}
	row, err := l.queries.TaskGet(ctx, l.conn, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, errorf("ratelimit: get task %s: %w", taskID, ErrUnknownTask)
	}
	if err != nil {
		return Task{}, wrapDBError(ctx, "get task", err)
	}
	return taskFromRow(row), nil
}

// TaskAttempts lists the attempts of a task, in order: none for a task
// never claimed, ErrUnknownTask when no task has that id.
func (l *Limiter) TaskAttempts(ctx context.Context, taskID string) ([]Attempt, error) {
	if err := l.callable(ctx); err != nil {
		return nil, err
	}
	id, err := parseID("taskID", taskID)
	if err != nil {
		return nil, err
	}
	rows, err := l.queries.AttemptListByTask(ctx, l.conn, id)
	if err != nil {
		return nil, wrapDBError(ctx, "list attempts", err)
	}
	if len(rows) == 0 {
		if err := l.knownTask(ctx, "list attempts of task", taskID, id); err != nil {
			return nil, err
		}
	}
	out := make([]Attempt, len(rows))
	for i, r := range rows {
		out[i] = Attempt{
			ID: idString(r.ID), TaskID: idString(r.TaskID), Number: int(r.AttemptNo), Status: r.Status,
			Retryable: r.Retryable, ErrorCode: r.ErrorCode.String, ErrorMessage: r.ErrorMessage.String,
			StartedAt: r.StartedAt, FinishedAt: deref(r.FinishedAt),
		}
	}
	return out, nil
}

// knownTask returns nil when a task has id, else ErrUnknownTask: a list of
// a task's rows that came back empty is of a task without any, or of none.
func (l *Limiter) knownTask(ctx context.Context, op, taskID string, id pgtype.UUID) error {
	_, err := l.queries.TaskGet(ctx, l.conn, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return errorf("ratelimit: %s %s: %w", op, taskID, ErrUnknownTask)
	}
	if err != nil {
		return wrapDBError(ctx, op, err)
	}
	return nil
}

func taskFromRow(r db.TaskGetRow) Task {
	t := Task{
		ID: idString(r.ID), Status: r.Status, Async: r.AsyncMode, Kind: r.Kind, Payload: json.RawMessage(r.Payload),
		ErrorCode: r.ErrorCode.String, ErrorMessage: r.ErrorMessage.String, Worker: r.LockedBy.String,
		ExecutionToken: idString(r.ExecutionToken), LeaseExpiresAt: deref(r.ExecutionLeaseExpiresAt),
		AttemptID: idString(r.AttemptID), AttemptCount: int(r.AttemptCount), RequeueCount: int(r.RequeueCount),
		LastEventSeq: int(r.LastEventSeq), NextRunAt: r.NextRunAt, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		FinishedAt: deref(r.FinishedAt),
	}
	if r.Error != nil && *r.Error != "" {
		t.Error = json.RawMessage(*r.Error)
	}
	return t
}
