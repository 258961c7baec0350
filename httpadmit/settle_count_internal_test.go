package httpadmit

import (
	"errors"
	"testing"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// The error an Observer gets for a settle that found reservations the database no longer knows
// counts them as English does: "1 reservation", "2 reservations" (it said "1 reservation(s)").
func TestUnknownGrantCountsItsReservations(t *testing.T) {
	t.Parallel()
	unknown := ratelimit.ReservationOutcome{Status: ratelimit.StatusUnknown}
	grant := ratelimit.Grant{Reservations: make([]ratelimit.Reservation, 2)}
	for _, c := range []struct {
		settled []ratelimit.ReservationOutcome
		want    string
	}{
		{[]ratelimit.ReservationOutcome{unknown, {Status: ratelimit.StatusCommitted}},
			"httpadmit: commit: 1 reservation of the grant unknown to the database: " + ratelimit.ErrUnknownGrant.Error()},
		{[]ratelimit.ReservationOutcome{unknown, unknown},
			"httpadmit: commit: 2 reservations of the grant unknown to the database: " + ratelimit.ErrUnknownGrant.Error()},
	} {
		err := unknownGrant("commit", grant, ratelimit.Settlement{Reservations: c.settled})
		if err == nil || err.Error() != c.want || !errors.Is(err, ratelimit.ErrUnknownGrant) {
			t.Errorf("unknownGrant = %v, want %q matching ErrUnknownGrant", err, c.want)
		}
	}
}
