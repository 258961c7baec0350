package ratelimit

import (
	"regexp"
	"strings"
	"testing"
)

// The holder a process takes allotments and maintenance leases under when it is given none is
// host/pid/random, its host cut to maxHolderHostBytes bytes (never inside a character) and made
// text PostgreSQL stores: a host of 200 multi-byte characters was 200 runes (%.200s), up to 800
// bytes, past MaxScopeBytes, and the allotments' default did not cut it at all.
func TestHolderNameIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	random := []byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab}
	a := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct{ name, host, want string }{
		{"a host", "gw-1.example", "gw-1.example"},
		{"none", "", "unknown-host"},
		{"maxHolderHostBytes", a(maxHolderHostBytes), a(maxHolderHostBytes)},
		{"maxHolderHostBytes+1", a(maxHolderHostBytes + 1), a(maxHolderHostBytes)},
		{"é across the bound", a(maxHolderHostBytes-1) + "é", a(maxHolderHostBytes - 1)},
		{"200 runes of 4 bytes", strings.Repeat("𝔥", 200), strings.Repeat("𝔥", maxHolderHostBytes/4)},
		{"NUL and invalid UTF-8", "gw\x00-1\xff", "gw-1\uFFFD"},
	} {
		got := holderName(c.host, 4242, random)
		if want := c.want + "/4242/0123456789ab"; got != want {
			t.Errorf("holderName(%s, %d bytes) = %.60q (%d bytes), want %.60q (%d bytes)", c.name, len(c.host), got, len(got), want, len(want))
		}
	}
	if long := holderName(strings.Repeat("€", 1<<10), 1<<30, random); len(long) > MaxScopeBytes {
		t.Errorf("holderName of a long host is %d bytes, past MaxScopeBytes (%d)", len(long), MaxScopeBytes)
	}
}

// The allotments' default holder and a maintenance lease's are the same host/pid/random, of 12
// hex digits each.
func TestDefaultHoldersHaveOneForm(t *testing.T) {
	t.Parallel()
	lease := newHolder()
	allot := AllotmentOptions{}.withDefaults().Holder
	form := regexp.MustCompile(`^(.+)/(\d+)/[0-9a-f]{12}$`)
	l, a := form.FindStringSubmatch(lease), form.FindStringSubmatch(allot)
	if l == nil || a == nil || l[1] != a[1] || l[2] != a[2] {
		t.Errorf("maintenance lease holder %q, allotment holder %q: want one host/pid/random form, 12 hex digits", lease, allot)
	}
	if lease == allot {
		t.Errorf("maintenance lease holder and allotment holder are both %q: want each its own random part", lease)
	}
}
