package httpadmit_test

import (
	"context"
	"fmt"

	"github.com/pgadmit/pgadmit/httpadmit"
)

// A request refused because the database did not answer within the
// decision timeout and one of its enforced limits fails closed: the default
// error handler answers 503, and an error handler of yours may log this
// message. Built by hand, as the middleware hands it to the error handler.
func ExampleUnavailableError_Error() {
	err := &httpadmit.UnavailableError{
		Err:    context.DeadlineExceeded,
		Limits: []httpadmit.Limit{{Mode: httpadmit.Enforce, OnFailure: httpadmit.FailClosed}},
	}
	fmt.Println(err)
	// Output:
	// httpadmit: admission control unavailable (1 limit fails closed): context deadline exceeded
}
