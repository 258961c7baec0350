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

// operatorDuration writes d as an operator writes it, as the README does: 24h, 1h30m and 1m
// rather than Go's 24h0m0s, 1h30m0s and 1m0s. time.ParseDuration reads it back as d.
func operatorDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
