package schema

import (
	"database/sql"
	"fmt"
	"slices"

	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// refusal reports goose's refusal err of pgadmit's options own followed by the caller's opts as
// a *ratelimit.ValidationError on the first of opts that goose refuses ("opts[1]"), wrapping
// err. goose's errors do not say which option they are about, and it refuses some only after
// applying them all (goose.WithTableName next to a store), so each prefix of opts is tried in
// turn: building a provider only reads the embedded migrations, and one that goose accepts is
// dropped without Close, which would close db.
func refusal(db *sql.DB, own, opts []goose.ProviderOption, err error) error {
	for i := range opts {
		if opts[i] == nil { // sets nothing (setOptions)
			continue
		}
		if _, perr := goose.NewProvider(goose.DialectCustom, db, FS, slices.Concat(own, setOptions(opts[:i+1]))...); perr != nil {
			return fmt.Errorf("schema: %w: %w", &ratelimit.ValidationError{
				Field:  fmt.Sprintf("opts[%d]", i),
				Reason: "goose refused it next to pgadmit's own version table store and table locker",
			}, err)
		}
	}
	// Not one of opts: pgadmit's own options or migrations.
	return fmt.Errorf("schema: goose provider: %w", err)
}
