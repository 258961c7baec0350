package main

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fillingDisk takes its first lines, then nothing, as a disk that filled up does.
type fillingDisk struct {
	mu    sync.Mutex
	lines int // how many writes it still takes
	taken strings.Builder
}

func (d *fillingDisk) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lines == 0 {
		return 0, syscall.ENOSPC
	}
	d.lines--
	return d.taken.Write(p)
}

// A sweeper whose log cannot be written (its disk filled up, or a full disk from the start)
// stops, exit 1, saying why on stderr, instead of sweeping on unseen until stopped: it used
// to log nothing more and exit 1 only once a signal stopped it.
func TestRecoverSweeperStopsWhenItsLogIsLost(t *testing.T) {
	t.Parallel()
	url, _ := newDatabase(t)
	for _, taken := range []int{0, 1, 3} {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		out := &fillingDisk{lines: taken}
		var errOut syncBuffer
		exited := make(chan int, 1)
		go func() {
			exited <- run(ctx, []string{"--database-url", url, "recover", "--every", "100ms"}, out, &errOut, func(string) string { return "" })
		}()
		select {
		case code := <-exited:
			want := "pgadmit recover: cannot write its output: " + syscall.ENOSPC.Error() + "\n"
			if code != exitFailure || errOut.String() != want {
				t.Errorf("recover --every onto a disk that filled after %d lines: exit %d, stderr %q; want exit 1, %q", taken, code, errOut.String(), want)
			}
			if got := strings.Count(out.taken.String(), "\n"); got != taken {
				t.Errorf("recover --every onto a disk that filled after %d lines logged %d:\n%s", taken, got, out.taken.String())
			}
		case <-time.After(10 * time.Second):
			cancel()
			t.Errorf("recover --every onto a disk that filled after %d lines still ran 10s later (exit %d once stopped); stderr %q",
				taken, <-exited, errOut.String())
		}
	}
}
