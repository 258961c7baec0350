package ratelimit

import (
	"strconv"
	"strings"
)

// localID is the admission's LocalID: its Limiter's instance id and its
// sequence. The instance id is random, so another Limiter finds none of
// its own admissions under it, nor can one be made up for it.
func (la *localAdmission) localID() string {
	return la.set.a.instance + "-" + strconv.FormatUint(la.seq, 10)
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
	instance, seqText, ok := strings.Cut(r.LocalID, "-")
	if !ok || instance != a.instance {
		return nil
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
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
		if idString(b.id) == r.Allotment {
			return b.admissions[seq]
		}
	}
	return nil
}
