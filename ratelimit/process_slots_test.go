package ratelimit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"unsafe"
)

// heldSlots counts, across the processes of TestExactAcrossProcesses, the
// requests holding a concurrency slot: a process takes one once Reserve
// has returned its grant and gives it back before it calls Commit. The
// counts live in one word of memory that every process maps from the same
// file, a 16-bit field per process, and each take or give is one atomic
// add to it: that add is the instant the slot changes hands, so the total
// is exact at every instant and its peak cannot miss one (a sampler of the
// database's leases can).
//
// What the peak proves: a request holds its lease in the database from the
// commit of its Reserve until the commit of its Commit (or the lease's
// expiry), and it is counted here only inside that span: after Reserve
// returned, before Commit was called, and before its lease expired (each
// holder checks that when it gives the slot back, and the parent that
// none of the dead process's leases had lapsed when it gave back its
// slots, once it saw it dead). So at every instant the total is at most
// the leases live in the database: a peak above the limit is an
// over-admission, never a false alarm, unless one of those checks failed
// too (a holder stalled past its lease's TTL: see procLeaseTTL). And it is
// exactly the number of requests inside their upstream call: a peak at or
// below the limit proves that no more than the limit were ever inside it at
// once, which is what a concurrency limit is for. What it cannot see is a
// lease in the moments the database counts it and no caller holds it
// (Reserve's answer or Commit's statement on the wire).
type heldSlots struct {
	mem  []byte
	held *atomic.Int64 // a 16-bit field per process: its requests holding a slot now
	peak *atomic.Int64 // the most requests, of all processes, that ever held one at once
}

const (
	heldSlotsSize      = 4096 // one page: two int64 at its start, aligned as the page is
	heldSlotsProcesses = 4    // fields in the held word
	heldSlotsFieldBits = 16
)

// newHeldSlotsFile creates, in dir, the file that the processes map.
func newHeldSlotsFile(dir string) (string, error) {
	path := filepath.Join(dir, "held-slots")
	return path, os.WriteFile(path, make([]byte, heldSlotsSize), 0o600)
}

// mapHeldSlots maps the file at path, shared with every process that maps it.
func mapHeldSlots(path string) (*heldSlots, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the mapping outlives the descriptor
	mem, err := mapShared(f, heldSlotsSize)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	return &heldSlots{
		mem:  mem,
		held: (*atomic.Int64)(unsafe.Pointer(&mem[0])),
		peak: (*atomic.Int64)(unsafe.Pointer(&mem[8])),
	}, nil
}

// take counts a slot taken by process proc, raising the peak if it is one.
func (h *heldSlots) take(proc int) {
	n := total(h.held.Add(1 << (proc * heldSlotsFieldBits)))
	for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
	}
}

// give counts a slot given back by process proc.
func (h *heldSlots) give(proc int) { h.held.Add(-1 << (proc * heldSlotsFieldBits)) }

// release gives back every slot of process proc, once it is dead, and
// returns how many it held.
func (h *heldSlots) release(proc int) int64 {
	shift := proc * heldSlotsFieldBits
	n := h.held.Load() >> shift & (1<<heldSlotsFieldBits - 1) // its field no longer changes
	h.held.Add(-n << shift)
	return n
}

// total is the sum of the fields of held.
func total(held int64) int64 {
	var n int64
	for proc := range heldSlotsProcesses {
		n += held >> (proc * heldSlotsFieldBits) & (1<<heldSlotsFieldBits - 1)
	}
	return n
}

func (h *heldSlots) unmap() error { return unmapShared(h.mem) }
