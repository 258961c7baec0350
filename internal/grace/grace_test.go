package grace

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Once the run's context ends, the grace lasts its length, then a give-back that still waits is
// given up on, and the grace says that something stays held.
func TestWaitGivesUpOnceTheGraceIsOver(t *testing.T) {
	t.Parallel()
	ctx, interrupt := context.WithCancel(context.Background())
	g := After(ctx, 10*time.Millisecond)
	defer g.End()
	interrupt()
	if g.Context().Err() != nil {
		t.Fatal("the grace ended with the run's context, want it to last its length after")
	}
	frozen := make(chan struct{})
	defer close(frozen)
	if g.Wait(func() { <-frozen }) {
		t.Error("Wait of a give-back that never ends reported it done")
	}
	if !g.LeftHeld() {
		t.Error("Wait gave up, and LeftHeld says nothing stays held")
	}
}

// A give-back that ends, or fails, is waited for; only a failure counts as left held. End ends
// the grace of a run that was never interrupted.
func TestDoNotesAFailedGiveBack(t *testing.T) {
	t.Parallel()
	g := After(context.Background(), time.Hour)
	if !g.Wait(func() {}) || g.LeftHeld() {
		t.Fatalf("Wait of a give-back that ended: LeftHeld %v, want done and nothing held", g.LeftHeld())
	}
	if err := g.Do(func(ctx context.Context) error { return ctx.Err() }); err != nil || g.LeftHeld() {
		t.Fatalf("Do of a give-back that succeeded: %v, LeftHeld %v; want nil, nothing held", err, g.LeftHeld())
	}
	lost := errors.New("server gone")
	if err := g.Do(func(context.Context) error { return lost }); !errors.Is(err, lost) || !g.LeftHeld() {
		t.Errorf("Do of a give-back that failed: %v, LeftHeld %v; want its error, something held", err, g.LeftHeld())
	}
	g.End()
	if g.Context().Err() == nil {
		t.Error("End left the grace's context running")
	}
}
