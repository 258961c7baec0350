package main

import (
	"flag"
	"strconv"
	"strings"
)

// flagError is the usage error for err, an error of fs.Parse. The flag package names a flag
// -name, where pgadmit's help and docs/cli.md write --name, and says only "parse error" of a value
// that is not a number or not a boolean: flagError names the flag as the help does and says
// what its value must be. A message it does not know is kept as it is.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return usagef("unknown flag --%s", name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return usagef("--%s needs a value", name)
	}
	for _, head := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, head)
		if !ok {
			continue
		}
		value, qerr := strconv.QuotedPrefix(rest) // as the flag package quotes it, %q
		if qerr != nil {
			break
		}
		rest = rest[len(value):]
		if rest, ok = strings.CutPrefix(rest, " for flag -"); !ok {
			if rest, ok = strings.CutPrefix(rest, " for -"); !ok { // a boolean's
				break
			}
		}
		name, reason, ok := strings.Cut(rest, ": ")
		if !ok {
			break
		}
		if reason == "parse error" {
			reason = wanted(fs.Lookup(name), reason)
		}
		return usagef("invalid value %s for --%s: %s", value, name, reason)
	}
	return usagef("%s", msg)
}

// wanted says what flag f's value must be, for a value its parser refused; otherwise, or for a
// flag it does not know, what the parser said.
func wanted(f *flag.Flag, said string) string {
	if f == nil {
		return said
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return said
	}
	switch g.Get().(type) {
	case bool:
		return "want true or false"
	case int, int64, uint, uint64:
		return "want a whole number"
	}
	return said
}
