package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/pprof"
)

// benchProfile is bench's --cpuprofile: this process's CPU profile (the
// library and the bench's workers, the client side of every admission)
// while the workloads run, for `go tool pprof`.
type benchProfile struct {
	file    *os.File
	created bool // by this run: a run that fails before profiling removes it
	started bool
}

// createBenchProfile creates path before anything else runs, so that a bad
// path fails the command at once; no profile when path is empty.
func createBenchProfile(path string) (*benchProfile, error) {
	if path == "" {
		return nil, nil
	}
	// An existing file (an earlier run's profile) is opened without truncating it: only a
	// run that gets to profile replaces it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err == nil {
		return &benchProfile{file: f, created: true}, nil
	}
	if errors.Is(err, fs.ErrExist) {
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
	}
	if err != nil {
		return nil, usagef("--cpuprofile: %v", err)
	}
	return &benchProfile{file: f}, nil
}

// start begins profiling.
func (p *benchProfile) start() error {
	if p == nil {
		return nil
	}
	if err := p.file.Truncate(0); err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(p.file); err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	p.started = true
	return nil
}

// stop ends the profile and closes its file; a profile that never started
// (the run failed first) leaves no new file behind, and an existing one as
// it was. Later calls do nothing.
func (p *benchProfile) stop() error {
	if p == nil || p.file == nil {
		return nil
	}
	f := p.file
	p.file = nil
	if !p.started {
		f.Close()
		if !p.created {
			return nil
		}
		return os.Remove(f.Name())
	}
	pprof.StopCPUProfile()
	return f.Close()
}
