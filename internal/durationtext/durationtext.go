// Package durationtext writes durations as an operator writes them.
package durationtext

import (
	"strings"
	"time"
)

// Operator writes d as an operator writes it, as docs/cli.md does: 24h, 1h30m and 1m rather
// than Go's 24h0m0s, 1h30m0s and 1m0s. time.ParseDuration reads it back as d.
func Operator(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
