package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// durationHint is a duration flag whose refusal of a value says why and what a duration looks
// like: Go's flag package says only "parse error", which tells an operator who wrote
// --older-than 7d or --every 30 nothing.
type durationHint struct{ flag.Value }

func (d durationHint) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		// Go says "invalid duration" of a value past what a Duration holds too, where the hint
		// would show the operator the form they wrote.
		switch {
		case wellFormedDuration.MatchString(s) && strings.HasPrefix(s, "-"):
			return errors.New("out of range: a duration is at least -2562047h")
		case wellFormedDuration.MatchString(s):
			return errors.New("out of range: a duration is at most 2562047h")
		}
		return fmt.Errorf("%s (write a duration such as 500ms, 30s, 15m or 168h; a day is 24h)", strings.TrimPrefix(err.Error(), "time: "))
	}
	return d.Value.Set(s)
}

// wellFormedDuration matches what time.ParseDuration reads, whatever its size.
var wellFormedDuration = regexp.MustCompile(`^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// explainDurations makes every duration flag of fs a durationHint.
func explainDurations(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isDuration := g.Get().(time.Duration); isDuration {
				f.Value = durationHint{f.Value}
			}
		}
	})
}
