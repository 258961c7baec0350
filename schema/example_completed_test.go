package schema_test

import (
	"context"
	"fmt"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/schema"
)

// A Migrate whose context was cancelled right after its last migration:
// the schema is current, which the message says before the context's
// error. Built by hand, as Migrate returns it (goose's results of the two
// migrations it applied).
func ExampleCompletedError_Error() {
	err := &schema.CompletedError{
		Applied: []*goose.MigrationResult{
			{Source: &goose.Source{Type: goose.TypeSQL, Path: "00022_hot_heartbeats.sql", Version: 22}, Duration: 40 * time.Millisecond, Direction: "up"},
			{Source: &goose.Source{Type: goose.TypeSQL, Path: "00023_comments_as_they_are.sql", Version: 23}, Duration: 12 * time.Millisecond, Direction: "up"},
		},
		Err: context.Canceled,
	}
	fmt.Println(err)
	// Output:
	// applied every pending migration (2, the last 00023_comments_as_they_are.sql), then: context canceled
}
