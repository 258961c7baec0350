package schema

import (
	"database/sql"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"

	"github.com/pressly/goose/v3"

	"github.com/pgadmit/pgadmit/internal/oneprefix"
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
			return oneprefix.Errorf("schema: %w: %w", &ratelimit.ValidationError{
				Field:  fmt.Sprintf("opts[%d]", i),
				Value:  shownOption(opts[i]),
				Reason: "goose refused it next to pgadmit's own version table store and table locker",
			}, err)
		}
	}
	// Not one of opts: pgadmit's own options or migrations.
	return fmt.Errorf("schema: goose provider: %w", err)
}

// shownOption names opt, not nil, for its refusal's Value: "goose.WithTableName" (without one the
// message read "invalid opts[0] (<nil>)", as of a nil option). Every ProviderOption is goose's (its
// method is unexported), and goose makes nearly all of them as closures of one type, whose %T
// ("goose.configFunc") names none: the closure's symbol names the With function that made it
// ("github.com/pressly/goose/v3.WithTableName.func1", "caller.WithTableName.func1" where the
// compiler inlined it, "caller.func5.WithSlog.1" where it did so in a func literal). Any other is
// named by its type.
func shownOption(opt goose.ProviderOption) string {
	if v := reflect.ValueOf(opt); v.Kind() == reflect.Func && !v.IsNil() {
		if f := runtime.FuncForPC(v.Pointer()); f != nil {
			if name, ok := optionConstructor(f.Name()); ok {
				return "goose." + name
			}
		}
	}
	return fmt.Sprintf("%T", opt)
}

// optionConstructor is the With function named in symbol, a closure's symbol: the part before
// its closure suffixes, "funcN" or, in a func literal that the With function was inlined into,
// a bare "N" ("main.func5.WithSlog.1").
func optionConstructor(symbol string) (string, bool) {
	parts := strings.Split(symbol, ".")
	i := len(parts) - 1
	for i > 0 && closureSuffix(parts[i]) {
		i--
	}
	if i == len(parts)-1 { // not a closure
		return "", false
	}
	return parts[i], strings.HasPrefix(parts[i], "With")
}

// closureSuffix reports whether part of a symbol is one the compiler gives a closure: "func1",
// or "1".
func closureSuffix(part string) bool {
	n := strings.TrimPrefix(part, "func")
	return n != "" && strings.Trim(n, "0123456789") == ""
}
