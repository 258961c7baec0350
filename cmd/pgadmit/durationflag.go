package main

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// durationHint is a duration flag whose refusal of a value says why and what a duration looks
// like: Go's flag package says only "parse error", which tells an operator who wrote
// --older-than 7d or --every 30 nothing.
type durationHint struct{ flag.Value }

func (d durationHint) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		return fmt.Errorf("%s (write a duration such as 500ms, 30s, 15m or 168h; a day is 24h)", strings.TrimPrefix(err.Error(), "time: "))
	}
	return d.Value.Set(s)
}

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
