package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// A task end whose batch's connection pgx gave up unread waits, up to
// 20 s, for pgx to close it before it reads whether the task ended
// (releaseIfEndedUnread); it waits holding none of the give-backs' turns
// (one at a time on a pool of 2 connections): another give-back runs
// meanwhile. It waited on a turn, and every give-back behind it waited
// too. Close still waits for it.
func TestEndedUnreadWaitsWithoutAGiveBackTurn(t *testing.T) {
	t.Parallel()
	pool := pgtest.OpenPool(t, pgtest.NewURL(t)+"&pool_max_conns=2")
	l := ratelimit.New(pool)
	unread := make(chan struct{}) // pgx still closing the connection
	if err := l.ReleaseIfEndedUnread(unread, "123e4567-e89b-12d3-a456-426614174000"); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	l.GiveBackUnheldInBackground(func(context.Context) error { close(ran); return nil })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Error("a give-back waited behind a task end waiting for its connection's close")
	}
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
		t.Error("Close returned before the task end's release ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(unread)
	<-closed
	assertLost(t, l, 0, "a task end's release of a task that is not there")
}
