package ratelimit

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
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
	instance, seq, tag, ok := parseLocalID(r.LocalID)
	if !ok || instance != a.instance {
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

// parseLocalID splits a LocalID into its instance id, sequence and tag;
// ok is false when it has not that form.
func parseLocalID(id string) (instance string, seq, tag uint64, ok bool) {
	parts := strings.Split(id, "-")
	if len(parts) != 3 {
		return "", 0, 0, false
	}
	seq, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return "", 0, 0, false
	}
	tag, err = strconv.ParseUint(parts[2], 16, 64)
	if err != nil {
		return "", 0, 0, false
	}
	return parts[0], seq, tag, true
}

// localsOnce refuses a grant whose Local reservations (rs at the indexes
// local) name one admission twice: by the same handle, or by LocalIDs that
// admission finds alike (a sequence with a leading zero, a tag in upper
// case). Settled once, at either place's amount, the other place would be
// reported as not settled by the very call that settled it.
func localsOnce(rs []Reservation, local []int) error {
	if len(local) < 2 {
		return nil
	}
	seen := make(map[any]int, 2*len(local)) // a handle or a LocalID: its first place
	for _, i := range local {
		r := rs[i]
		var names []any
		if r.local != nil {
			names = append(names, r.local)
		}
		if r.LocalID != "" {
			name := r.LocalID
			if instance, seq, tag, ok := parseLocalID(name); ok {
				name = instance + "-" + strconv.FormatUint(seq, 10) + "-" + strconv.FormatUint(tag, 16)
			}
			names = append(names, name)
		}
		for _, name := range names {
			if j, dup := seen[name]; dup {
				return &ValidationError{Field: fmt.Sprintf("Reservations.LocalID[%d]", i), Value: shown(r.LocalID),
					Reason: fmt.Sprintf("same Local reservation as Reservations.LocalID[%d]: %s", j, grantNamesLocalOnce)}
			}
		}
		for _, name := range names {
			seen[name] = i
		}
	}
	return nil
}

// grantNamesLocalOnce is why a grant that names a Local reservation twice
// is refused.
const grantNamesLocalOnce = "a grant names each of its reservations once"
