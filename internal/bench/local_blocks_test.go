package bench

import (
	"context"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/dbtest"
	"github.com/pgadmit/pgadmit/internal/pgtest"
)

// W8 reports the blocks it took and how many of its Local limits the database decided, and
// fails a check when the statements of its blocks fail: its admissions were then all decided in
// the database, and its admissions per second measured that, not local allotments.
func TestLocalWorkloadReportsItsBlocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, refuse := range []bool{false, true} {
		pool := pgtest.NewPool(t)
		pgtest.AwaitRoomInWindow(t, pool, time.Minute, 2*time.Second)
		if refuse {
			if err := dbtest.New().OpsAllotmentsRefuseBlocks(ctx, pool); err != nil {
				t.Fatal(err)
			}
		}
		cfg := Config{Workers: 4, Duration: time.Second, Only: []string{"W8"}}
		out, err := Run(ctx, pool, cfg, nil)
		if err != nil || len(out) != 1 {
			t.Fatalf("Run W8 (blocks refused: %t): %+v, %v", refuse, out, err)
		}
		res := out[0]
		decided := res.Admitted + res.Rejected
		if !refuse && (res.LocalBlocks == 0 || res.LocalFailures != 0 || !res.OK || res.LocalInDatabase*2 > decided) {
			t.Errorf("W8: %d blocks, %d failures, ok %t, %d of %d Local limits decided in the database; want blocks, no failure, ok, most admitted from blocks",
				res.LocalBlocks, res.LocalFailures, res.OK, res.LocalInDatabase, decided)
		}
		if refuse && (res.LocalBlocks != 0 || res.LocalFailures == 0 || res.OK || res.Errors != 0 || res.LocalInDatabase != decided) {
			t.Errorf("W8 with blocks refused: %d blocks, %d failures, %d errors, ok %t, %d of %d Local limits decided in the database; want no block, failures, no error, not ok, every one",
				res.LocalBlocks, res.LocalFailures, res.Errors, res.OK, res.LocalInDatabase, decided)
		}
	}
}
