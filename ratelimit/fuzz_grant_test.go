package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// FuzzGrantInput feeds Commit, Release, Attach, RenewLeases and
// ReleaseLeases a grant decoded from arbitrary JSON (a grant that went
// through another process, altered or corrupted on the way), with an
// arbitrary actual amount, reason and attempt id, on a real database that
// holds a grant, a running task and its attempt for it to name. Whatever
// the grant says, each call returns nil or an error a caller can match:
// a *ValidationError with a message of one short line, or one of the
// sentinels its doc names; never a raw server error, and never a panic.
// The database's books then still balance.
func FuzzGrantInput(f *testing.F) {
	pool := pgtest.NewPool(f)
	l := ratelimit.New(pool)
	f.Cleanup(l.Close)
	ctx := context.Background()
	key := uniqueKey("fuzzgrant")
	grant, err := l.Reserve(ctx, "", "", []ratelimit.Limit{window("api_key", key, "tokens", 1e12, 10), concurrent("model", key, 1e12)})
	if err != nil {
		f.Fatal(err)
	}
	task, err := l.CreateTask(ctx, ratelimit.TaskSpec{Kind: "fuzz", Worker: "w"})
	if err != nil {
		f.Fatal(err)
	}
	seed, err := json.Marshal(grant)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, "tokens", 5.0, "reason", task.AttemptID)
	f.Add(seed, "tokens", math.NaN(), "\xff", "")
	f.Add([]byte(`{"Reservations":[{"ID":"123e4567-e89b-12d3-a456-426614174000","ScopeType":"a","ScopeKey":"b","Metric":"m","Window":-1,"WindowStart":"0001-01-01T00:00:00Z","Amount":-1}]}`), "m", 1.0, "", task.AttemptID)
	f.Add([]byte(`{"Leases":[{"ID":"123e4567-e89b-12d3-a456-426614174000","TTL":1e18}],"TaskID":"x"}`), "", 0.0, "", "123e4567-e89b-12d3-a456-426614174000")
	f.Add([]byte(`{"Reservations":[{"Local":true,"LocalID":"a"},{"Local":true,"LocalID":"a"}]}`), "tokens", 1e300, "r", task.AttemptID)
	f.Add([]byte(`{"Reservations":[{"ID":"123E4567-E89B-12D3-A456-426614174000"},{"ID":"123e4567-e89b-12d3-a456-426614174000"}]}`), "", 1.0, "", task.AttemptID)
	f.Add([]byte(`{"Reservations":[{"ID":"123e4567-e89b-12d3-a456-426614174000","WindowStart":"9999-12-31T23:59:59.999999999Z","Window":60000000000,"ScopeType":"a","ScopeKey":"b","Metric":"m"}]}`), "m", 2.0, "", "")
	matchable := []error{
		ratelimit.ErrInvalidInput, ratelimit.ErrUnknownGrant, ratelimit.ErrUnknownTask,
		ratelimit.ErrTaskFinished, ratelimit.ErrLeaseLost,
	}
	f.Fuzz(func(t *testing.T, grantJSON []byte, metric string, actual float64, reason, attemptID string) {
		var g ratelimit.Grant
		if json.Unmarshal(grantJSON, &g) != nil {
			return
		}
		calls := map[string]func() error{
			"Commit": func() error {
				_, err := l.Commit(ctx, g, map[string]float64{metric: actual})
				return err
			},
			"Release":       func() error { _, err := l.Release(ctx, g, reason); return err },
			"Attach":        func() error { _, err := l.Attach(ctx, attemptID, g); return err },
			"RenewLeases":   func() error { _, err := l.RenewLeases(ctx, g.Leases); return err },
			"ReleaseLeases": func() error { _, err := l.ReleaseLeases(ctx, g.Leases, reason); return err },
		}
		for _, op := range []string{"Attach", "RenewLeases", "Commit", "Release", "ReleaseLeases"} {
			err := calls[op]()
			if err == nil {
				continue
			}
			ok := false
			for _, want := range matchable {
				ok = ok || errors.Is(err, want)
			}
			if !ok {
				t.Fatalf("%s of %s: err = %v, want nil or a documented error", op, grantJSON, err)
			}
			var invalid *ratelimit.ValidationError
			if errors.As(err, &invalid) {
				if msg := err.Error(); len(msg) > 400 || strings.ContainsAny(msg, "\n\r\x00") || !utf8.ValidString(msg) {
					t.Fatalf("%s of %s: message %q is not one short line of valid UTF-8", op, grantJSON, msg)
				}
			}
		}
		if off := booksOff(t, pool, "api_key", key); len(off) != 0 {
			t.Fatalf("after %s: the books are off: %+v", grantJSON, off)
		}
	})
}
