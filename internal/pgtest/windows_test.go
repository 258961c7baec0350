package pgtest

import (
	"testing"
	"time"
)

// After AwaitRoomInWindow, the database's current window has what was asked left: with a 2 s
// window and 1.5 s asked for, most calls wait for the next window, some return at once.
func TestAwaitRoomInWindow(t *testing.T) {
	t.Parallel()
	pool := NewPool(t)
	const w, need = 2 * time.Second, 1500 * time.Millisecond
	for range 4 {
		start := time.Now()
		before := leftInWindow(DBNow(t, pool), w)
		AwaitRoomInWindow(t, pool, w, need)
		left := leftInWindow(DBNow(t, pool), w)
		// The last clock reading comes later than the moment AwaitRoomInWindow returned, by a
		// round trip or, on a busy machine, by a stall of any length, and the window has that
		// much less left by then. Added back, what the calls took beyond what they must (nothing,
		// or the wait for the next window) makes the check independent of stalls: it used to
		// allow 500ms in all. A stall long enough to reach a later window leaves that window's
		// part, and at least as much again added back.
		took, must := time.Since(start), time.Duration(0)
		if before < need {
			must = before + 50*time.Millisecond // AwaitRoomInWindow's wait
		}
		if extra := max(took-must, 0); left+extra < need-500*time.Millisecond {
			t.Errorf("%s left in the window when AwaitRoomInWindow returned, at most (%s read %s later), want about %s or more",
				left+extra, left, extra, need)
		}
		time.Sleep(700 * time.Millisecond) // into the part of the window that has too little left
	}
}

// windowWithRoom keeps w while its window has need left, and near the window's end picks a
// length a few minutes longer whose window has: a test on it then starts at once, where
// AwaitRoomInWindow on w would sleep until the next window (up to need). Over a week of
// moments, every length it returns has need left, is w whenever w's window has, and is a
// whole number of seconds at most a quarter of an hour longer; it finds none only where no
// length it tries has need left, at a few moments at most.
func TestWindowWithRoom(t *testing.T) {
	t.Parallel()
	const w, need = time.Hour, 5 * time.Minute
	hour := time.Date(2026, 12, 6, 21, 0, 0, 0, time.UTC)
	if d, ok := windowWithRoom(hour.Add(58*time.Minute), w, need); !ok || d == w || leftInWindow(hour.Add(58*time.Minute), d) < need {
		t.Errorf("windowWithRoom 2 minutes before the hour = %v, %v; want a longer window with %v left", d, ok, need)
	}
	nearEnd, none := 0, 0
	for now := hour; now.Before(hour.Add(7 * 24 * time.Hour)); now = now.Add(10 * time.Second) {
		if leftInWindow(now, w) < need {
			nearEnd++
		}
		d, ok := windowWithRoom(now, w, need)
		switch {
		case !ok:
			none++
			for _, extra := range windowExtras {
				if left := leftInWindow(now, w+extra); left >= need {
					t.Fatalf("at %v: none found, but a window of %v has %v left", now, w+extra, left)
				}
			}
		case leftInWindow(now, d) < need:
			t.Fatalf("at %v: a window of %v, with %v left; want %v", now, d, leftInWindow(now, d), need)
		case d != w && leftInWindow(now, w) >= need:
			t.Fatalf("at %v: a window of %v, though one of %v has %v left", now, d, w, leftInWindow(now, w))
		case d < w || d > w+15*time.Minute || d%time.Second != 0:
			t.Fatalf("at %v: a window of %v; want a whole number of seconds from %v to a quarter of an hour more", now, d, w)
		}
	}
	if nearEnd == 0 || none > nearEnd/100 {
		t.Errorf("none found at %d of the %d moments near the end of an hour's window; want at most 1%%", none, nearEnd)
	}
}

// shortWindowWithRoom, over three days of moments, with windows of 12 to 20 s and 9 s needed (the
// stranding test's): the window it picks has 9 s left once its sleep, if any, is over; it sleeps
// only when the window it picks would not have; and that window ends no later than any other
// length's with 9 s left (the current window or, after a sleep, the next). Sleeps are rare and
// short (under one moment in ten, about 1.4 s; at under 1% of moments no current window has 9 s
// left), where AwaitRoomInWindow on 12 s alone sleeps at three moments in four, up to 9 s; on
// average the window ends after under 11 s, where the 12 s one ends after 15 s.
func TestShortWindowWithRoom(t *testing.T) {
	t.Parallel()
	const need = 9 * time.Second
	var lengths []time.Duration
	for s := 12; s <= 20; s++ {
		lengths = append(lengths, time.Duration(s)*time.Second)
	}
	endOf := func(now time.Time, d time.Duration) time.Duration { // as AwaitRoomInWindow has it
		if left := leftInWindow(now, d); left >= need {
			return left
		}
		return leftInWindow(now, d) + d
	}
	start := time.Date(2026, 12, 6, 21, 0, 0, 0, time.UTC)
	moments, slept, none := 0, 0, 0
	var sumEnd, sumOld, sumWait time.Duration
	for now := start; now.Before(start.Add(3 * 24 * time.Hour)); now = now.Add(997*time.Millisecond + 13*time.Microsecond) {
		w, wait := shortWindowWithRoom(now, lengths, need)
		left := leftInWindow(now.Add(wait), w)
		switch {
		case w < lengths[0] || w > lengths[len(lengths)-1]:
			t.Fatalf("at %v: a window of %v, not one of %v", now, w, lengths)
		case left < need:
			t.Fatalf("at %v: a window of %v with %v left after a sleep of %v; want %v", now, w, left, wait, need)
		case wait > 0 && leftInWindow(now, w) >= need:
			t.Fatalf("at %v: a sleep of %v, though the window of %v had %v left", now, wait, w, leftInWindow(now, w))
		case wait > 0 && left != w-awaitPastStart:
			t.Fatalf("at %v: a sleep of %v woke with %v of a %v window left; want just past its start", now, wait, left, w)
		}
		end := wait + left
		for _, d := range lengths {
			if other := endOf(now, d); other < end-awaitPastStart {
				t.Fatalf("at %v: the window of %v ends in %v, the one of %v with %v left in %v", now, w, end, d, need, other)
			}
		}
		moments++
		if wait > 0 {
			slept++
			sumWait += wait
		}
		room := false
		for _, d := range lengths {
			room = room || leftInWindow(now, d) >= need
		}
		if !room {
			none++
		}
		sumEnd += end
		sumOld += endOf(now, lengths[0])
	}
	mean, old := sumEnd/time.Duration(moments), sumOld/time.Duration(moments)
	meanWait := sumWait / time.Duration(max(slept, 1))
	t.Logf("%d moments: slept at %d (%.1f%%, %v on average), %d with no window of %v left; the window ends after %v on average, the 12 s one after %v",
		moments, slept, 100*float64(slept)/float64(moments), meanWait.Round(time.Millisecond), none, need, mean.Round(time.Millisecond), old.Round(time.Millisecond))
	if slept > moments/10 || meanWait > 2*time.Second || none > moments/100 || mean > need+2*time.Second {
		t.Errorf("slept at %d of %d moments, %v on average (%d with no window of %v left), the window ending after %v on average; want at most 10%%, 2s, 1%%, %v",
			slept, moments, meanWait, none, need, mean, need+2*time.Second)
	}
}
