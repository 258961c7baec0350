package main

import (
	"time"

	"github.com/pgadmit/pgadmit/internal/durationtext"
)

// minInterval is the shortest interval but 0 of a flag that repeats something while a command
// runs: bench's and doctor's --progress, recover's --every. A progress line every microsecond
// floods stderr (and takes a processor from the workers bench measures); a sweeper pass every
// microsecond keeps the database busy with passes that find nothing.
const minInterval = 100 * time.Millisecond

// checkInterval refuses a value of the interval flag --name below minInterval, negative ones
// included, but 0, which does what zero says ("never", "a single pass").
func checkInterval(name string, d time.Duration, zero string) error {
	if d != 0 && d < minInterval {
		return usagef("--%s must be 0 (%s) or at least %s, got %s", name, zero, minInterval, durationtext.Operator(d))
	}
	return nil
}

// minDuration is the shortest value of a flag that bounds how long something waits or runs:
// --connect-timeout, --pass-timeout (recover, prune, doctor, inspect), bench's --duration. Under
// it nothing useful fits: no connection is made within 1ns (the command fails, "no answer within
// 1ns"), a pass cut off at once does nothing, and a workload of 1ns ran no operation and passed
// its checks.
// It is minInterval, so that one floor holds for every such flag.
const minDuration = minInterval

// checkDuration refuses a value of the flag --name under minDuration, 0 and negative ones
// included.
func checkDuration(name string, d time.Duration) error {
	if d < minDuration {
		return usagef("--%s must be at least %s, got %s", name, minDuration, durationtext.Operator(d))
	}
	return nil
}
