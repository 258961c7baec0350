package promadmit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgadmit/pgadmit/internal/freezer"
	"github.com/pgadmit/pgadmit/internal/pgtest"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// The combining collector reports, at each scrape, what the Limiter's
// Stats say: callers on one key share statements, some of them hot, and
// the statements' time adds up.
func TestCombiningCollectorReportsLimiterStats(t *testing.T) {
	t.Parallel()
	limiter := ratelimit.New(pgtest.NewPool(t))
	reg := prometheus.NewRegistry()
	registerCombining(t, reg, limiter)

	const callers, tries = 16, 20
	key := fmt.Sprintf("combining-%d", time.Now().UnixNano())
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range tries {
				g, err := limiter.Reserve(context.Background(), "", "", []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: key},
					Metric: ratelimit.MetricRequests, Limit: 1e9, Amount: 1, Window: time.Hour}})
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := limiter.Commit(context.Background(), g, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	s := limiter.Stats()
	if s.Reserve.Requests != callers*tries || s.Reserve.Batches >= s.Reserve.Requests || s.Reserve.Hot == 0 || s.Reserve.Busy <= 0 {
		t.Fatalf("Limiter.Stats %+v: want %d reserves in fewer statements, some hot, with their time", s, callers*tries)
	}
	page := scrape(t, reg)
	for _, want := range []string{
		fmt.Sprintf(`pgadmit_combined_statements_total{kind="reserve"} %d`, s.Reserve.Batches),
		fmt.Sprintf(`pgadmit_combined_calls_total{kind="reserve"} %d`, s.Reserve.Requests),
		fmt.Sprintf(`pgadmit_combined_hot_statements_total{kind="reserve"} %d`, s.Reserve.Hot),
		fmt.Sprintf(`pgadmit_combined_statements_total{kind="settle"} %d`, s.Settle.Batches),
		fmt.Sprintf(`pgadmit_combined_calls_total{kind="settle"} %d`, s.Settle.Requests),
		fmt.Sprintf(`pgadmit_combined_statement_seconds_total{kind="reserve"} %v`, s.Reserve.Busy.Seconds()),
		"pgadmit_lost_total 0",
		"pgadmit_give_backs_dropped_total 0",
		"pgadmit_give_backs_failed_total 0",
		"# TYPE pgadmit_give_backs_waiting gauge",
		"pgadmit_give_backs_waiting 0",
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", page)
	}
}

// A nil Limiter is an error; a second Limiter registers under labels of
// its own.
func TestCombiningCollectorRegistration(t *testing.T) {
	t.Parallel()
	if _, err := promadmit.NewCombiningCollector(nil); err == nil {
		t.Error("NewCombiningCollector(nil): no error")
	}
	pool := pgtest.NewPool(t)
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		c, err := promadmit.NewCombiningCollector(ratelimit.New(pool))
		if err != nil {
			t.Fatal(err)
		}
		if err := prometheus.WrapRegistererWith(prometheus.Labels{"limiter": name}, reg).Register(c); err != nil {
			t.Fatalf("register limiter %s: %v", name, err)
		}
	}
	c, err := promadmit.NewCombiningCollector(ratelimit.New(pool))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(c); err == nil {
		t.Error("a third Limiter registered without labels of its own beside two with them")
	}
	page := scrape(t, reg)
	for _, name := range []string{"a", "b"} {
		if want := fmt.Sprintf(`pgadmit_combined_statements_total{kind="reserve",limiter=%q} 0`, name); !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s:\n%s", want, page)
		}
	}
}

// pgadmit_lost_total counts a Reserve whose answer a frozen server kept
// after its caller left: the server committed it, and nobody can give its
// grant back.
func TestCombiningCollectorReportsWhatWasLost(t *testing.T) {
	t.Parallel()
	fr, pool := freezer.NewPool(t, pgtest.NewPool(t).Config(), ratelimit.ConfigurePool)
	limiter := ratelimit.New(pool)
	reg := prometheus.NewRegistry()
	registerCombining(t, reg, limiter)
	limits := []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "api_key", Key: fmt.Sprintf("lost-%d", time.Now().UnixNano())},
		Metric: ratelimit.MetricRequests, Limit: 10, Amount: 1, Window: time.Hour}}
	if _, err := limiter.Reserve(context.Background(), "", "", limits); err != nil { // its statement prepared
		t.Fatal(err)
	}
	fr.Freeze()
	ctx, leave := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { _, err := limiter.Reserve(ctx, "", "", limits); errs <- err }()
	select {
	case <-fr.SentFrozen():
	case <-time.After(10 * time.Second):
		t.Fatal("Reserve sent nothing to the frozen server in 10 s")
	}
	leave()
	<-errs
	limiter.Close()
	if page := scrape(t, reg); !strings.Contains(page, "pgadmit_lost_total 1\n") {
		t.Errorf("/metrics lacks pgadmit_lost_total 1 after a Reserve lost its answer:\n%s", page)
	}
}

// The blocks of Local limits are counted as Limiter.Stats counts them: one
// granted for a few Local admissions, none failed, and the admissions by
// where they were decided: five from the block, and one too large for any
// (100 of 1000, past a sixteenth) in the database. (Five of the first
// block's 16 units: more than half would take the next block ahead, in the
// background, between Stats and the scrape.)
func TestCombiningCollectorReportsLocalBlocks(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	hour := pgtest.WindowWithRoom(t, pool, time.Hour, time.Minute) // an hour or a few minutes more: one block serves all
	limiter := ratelimit.New(pool)
	defer limiter.Close()
	reg := prometheus.NewRegistry()
	registerCombining(t, reg, limiter)
	limits := []ratelimit.Limit{{Scope: ratelimit.Scope{Type: "model", Key: fmt.Sprintf("local-%d", time.Now().UnixNano())},
		Metric: ratelimit.MetricTokens, Limit: 1000, Amount: 1, Window: hour, Local: true}}
	for range 5 {
		if _, err := limiter.Reserve(context.Background(), "", "", limits); err != nil {
			t.Fatal(err)
		}
	}
	large := limits[0]
	large.Amount = 100
	if _, err := limiter.Reserve(context.Background(), "", "", []ratelimit.Limit{large}); err != nil {
		t.Fatal(err)
	}
	s := limiter.Stats().Local
	if s.Granted != 1 || s.Failed != 0 || s.FromBlocks != 5 || s.InDatabase != 1 {
		t.Fatalf("Stats().Local = %+v after 5 Local admissions and one too large for a block, want one block granted, no failure, 5 from it, 1 in the database", s)
	}
	page := scrape(t, reg)
	for _, want := range []string{
		"pgadmit_local_blocks_granted_total 1",
		"pgadmit_local_blocks_no_room_total 0",
		"pgadmit_local_statement_failures_total 0",
		"pgadmit_local_blocks_abandoned_total 0",
		`pgadmit_local_limits_total{decided="block"} 5`,
		`pgadmit_local_limits_total{decided="database"} 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
