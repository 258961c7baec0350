package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// benchProfile is bench's --cpuprofile: this process's CPU profile (the
// library and the bench's workers, the client side of every admission)
// while the workloads run, for `go tool pprof`.
type benchProfile struct {
	file    *os.File
	started bool
}

// createBenchProfile creates path before anything else runs, so that a bad
// path fails the command at once; no profile when path is empty.
func createBenchProfile(path string) (*benchProfile, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Create(path)
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
	if err := pprof.StartCPUProfile(p.file); err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	p.started = true
	return nil
}

// stop ends the profile and closes its file; a profile that never started
// (the run failed first) leaves no file behind. Later calls do nothing.
func (p *benchProfile) stop() error {
	if p == nil || p.file == nil {
		return nil
	}
	f := p.file
	p.file = nil
	if !p.started {
		f.Close()
		return os.Remove(f.Name())
	}
	pprof.StopCPUProfile()
	return f.Close()
}
