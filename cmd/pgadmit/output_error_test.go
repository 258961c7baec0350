package main

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// fullDisk is a stdout that takes nothing, as /dev/full or a full disk does.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// A command whose output could not be written did not do what it was asked: `pgadmit migrate
// version > v` or `pgadmit doctor >> log` on a full disk exited 0 with nothing written, which a
// script reads as success.
func TestACommandWhoseOutputIsLostExits1(t *testing.T) {
	t.Parallel()
	url := pgtest.NewURL(t)
	for _, args := range [][]string{
		{"--help"},
		{"migrate", "--help"},
		{"--database-url", url, "migrate", "version"},
		{"--database-url", url, "migrate", "status"},
		{"--database-url", url, "migrate", "up"},
		{"--database-url", url, "doctor"},
		{"--database-url", url, "recover"},
		{"--database-url", url, "prune"},
		{"--database-url", url, "inspect"},
	} {
		var errOut bytes.Buffer
		code := run(context.Background(), args, fullDisk{}, &errOut, func(string) string { return "" })
		if code != exitFailure || !strings.Contains(errOut.String(), "cannot write its output") ||
			!strings.Contains(errOut.String(), syscall.ENOSPC.Error()) {
			t.Errorf("pgadmit %s onto a full disk: exit %d, stderr %q; want exit 1 saying the output was lost",
				strings.Join(args, " "), code, errOut.String())
			continue
		}
		oneLine(t, "pgadmit "+strings.Join(args, " ")+"'s error", errOut.String())
	}
}
