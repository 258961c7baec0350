package plural_test

import (
	"fmt"
	"testing"

	"github.com/pgadmit/pgadmit/internal/plural"
)

// A count reads as English does: the singular for 1 alone, the plural for 0 and for more, an
// irregular plural as given.
func ExampleCount() {
	for _, n := range []int{0, 1, 2} {
		fmt.Println(plural.Count(n, "reservation", "reservations"))
	}
	fmt.Println(plural.Count(int64(1), "entry", "entries"), "and", plural.Count(uint32(3), "entry", "entries"))
	fmt.Println("a batch of", plural.Count(1, "row", "rows"), "left")
	// Output:
	// 0 reservations
	// 1 reservation
	// 2 reservations
	// 1 entry and 3 entries
	// a batch of 1 row left
}

// Noun is the form alone, for a count written otherwise ("10+ problems", a count in a table).
func TestNounIsTheSingularForOneAlone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int64
		want string
	}{{-2, "leases"}, {-1, "leases"}, {0, "leases"}, {1, "lease"}, {2, "leases"}, {1 << 40, "leases"}} {
		if got := plural.Noun(c.n, "lease", "leases"); got != c.want {
			t.Errorf("Noun(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
