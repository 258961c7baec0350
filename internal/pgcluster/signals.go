package pgcluster

import (
	"os"
	"os/signal"
	"syscall"
)

// StopSignals are the signals on which a process that started a cluster stops it before it
// ends: Ctrl-C, SIGTERM, and SIGHUP (a terminal that closed) unless the process ignores it
// (nohup). Left to their default action, they end the process with its cluster running.
func StopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}
