package main

import (
	"context"
	"errors"
)

// Commands whose library side (issue 4: Recover, Prune, Doctor, tasks) has not landed yet.

var errPending = errors.New("not available yet: needs ratelimit's Recover, Prune, Doctor and tasks (issue 4)")

func pending(name, summary string, need dbNeed) *command {
	c := &command{name: name, args: "[flags]", summary: summary + " (not available yet)", help: "Not available yet.", db: need}
	c.run = func(ctx context.Context, a *app, args []string) error {
		if _, err := a.parse(c, a.flags(c), args); err != nil {
			return err
		}
		return errPending
	}
	return c
}

func demoCommand() *command {
	return pending("demo", "play a realistic gateway against the database", dbOptional)
}
