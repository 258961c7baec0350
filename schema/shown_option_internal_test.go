package schema

import (
	"testing"

	"github.com/pressly/goose/v3"
)

// A goose option made inside a func literal that the compiler inlined its With function into is
// a closure whose symbol ends ".WithSlog.1", not ".WithSlog.func1": its refusal read "invalid
// opts[0] (goose.configFunc)", a type no user writes. It names the With function that made it.
func TestShownOptionNamesItsWithFunction(t *testing.T) {
	t.Parallel()
	for symbol, want := range map[string]string{
		"github.com/pressly/goose/v3.WithTableName.func1":                    "WithTableName",
		"example.com/app.main.WithTableName.func6":                           "WithTableName",
		"example.com/app.setup.newProvider.WithLocker.func10":                "WithLocker",
		"github.com/pgadmit/pgadmit/schema.TestShownOption.func5.WithSlog.1": "WithSlog",
		"example.com/app.main.main.func2.WithVerbose.func11":                 "WithVerbose",
		"example.com/app.main.func3.WithExcludeNames.func1.2":                "WithExcludeNames",
	} {
		if got, ok := optionConstructor(symbol); !ok || got != want {
			t.Errorf("optionConstructor(%q) = %q, %v; want %q", symbol, got, ok, want)
		}
	}
	for _, symbol := range []string{"example.com/app.main.func1", "example.com/app.myOption.func2.1", "example.com/app.(*T).Option"} {
		if got, ok := optionConstructor(symbol); ok {
			t.Errorf("optionConstructor(%q) = %q, true; want no With function", symbol, got)
		}
	}
	// Made in a goroutine's func literal, where go1.26 names the closure ".WithSlog.1".
	made := make(chan goose.ProviderOption)
	go func() { made <- goose.WithSlog(nil) }()
	if got := shownOption(<-made); got != "goose.WithSlog" {
		t.Errorf("shownOption(goose.WithSlog(nil) made in a goroutine) = %q, want goose.WithSlog", got)
	}
}
