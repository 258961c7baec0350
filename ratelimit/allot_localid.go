package ratelimit

import (
	"crypto/rand"
	"encoding/binary"
	"strconv"
	"strings"
)

// localID is the admission's LocalID: its Limiter's instance id, its
// sequence and its tag. The instance id and the tag are random, so another
// Limiter finds none of its own admissions under it, and a holder of one
// grant cannot name another admission of the same Limiter by guessing the
// next sequence.
func (la *localAdmission) localID() string {
	return la.set.a.instance + "-" + strconv.FormatUint(la.seq, 10) + "-" + strconv.FormatUint(la.tag, 16)
}

// randomTag is a LocalID's tag, from crypto/rand (about 40 ns here): math/rand
// promises nothing about how predictable it is.
func randomTag() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return binary.LittleEndian.Uint64(b[:])
}

// admission finds the Local admission r names by its LocalID, that this
// Limiter admitted from a block it has not returned yet; nil otherwise (r
// names another Limiter's admission, or a block already returned, or has
// no LocalID: it was encoded before there was one, or altered). The
// block must be the one r names, of the counter r names.
func (a *allotments) admission(r Reservation) *localAdmission {
	if a == nil {
		return nil
	}
	parts := strings.Split(r.LocalID, "-")
	if len(parts) != 3 || parts[0] != a.instance {
		return nil
	}
	seq, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return nil
	}
	tag, err := strconv.ParseUint(parts[2], 16, 64)
	if err != nil {
		return nil
	}
	a.mu.Lock()
	s := a.sets[r.counter()]
	a.mu.Unlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.open() {
		if la := b.admissions[seq]; la != nil && la.tag == tag && idString(b.id) == r.Allotment {
			return la
		}
	}
	return nil
}
