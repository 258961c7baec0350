package promadmit

import (
	"go/ast"
	"go/token"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/internal/gosrc"
	"github.com/pgadmit/pgadmit/ratelimit"
)

// pgadmit_db_operations_total has every operation with every result (each
// Result* constant of this package) from New on, at 0: the histogram's
// series of a result appear with its first call, which increase over its
// _count never sees, and a rare result (a renewal's lease_lost) may come
// once. The first one is an increase of 1 over the scrape before it.
func TestOperationsCountedFromZero(t *testing.T) {
	t.Parallel()
	_, files, err := gosrc.ParseDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for gen, spec := range gosrc.Specs(files) {
		if gen.Tok != token.CONST {
			continue
		}
		for _, n := range spec.(*ast.ValueSpec).Names {
			if strings.HasPrefix(n.Name, "Result") {
				results = append(results, n.Name)
			}
		}
	}
	if len(results) < 10 {
		t.Fatalf("found the constants %v", results)
	}
	values := map[string]string{ // the constants by name: the parser gives names, not values
		"ResultOK": ResultOK, "ResultExceeded": ResultExceeded, "ResultTimeout": ResultTimeout,
		"ResultError": ResultError, "ResultSkipped": ResultSkipped, "ResultLeaseLost": ResultLeaseLost,
		"ResultUnknownGrant": ResultUnknownGrant, "ResultRejected": ResultRejected,
		"ResultLockWait": ResultLockWait, "ResultCanceled": ResultCanceled,
	}
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	counts := operationCounts(t, reg)
	ops := []string{httpadmit.OpReserve, httpadmit.OpCommit, httpadmit.OpRelease, httpadmit.OpRenewLeases, OpRecover, OpPrune}
	for _, op := range ops {
		for _, name := range results {
			r, ok := values[name]
			if !ok {
				t.Fatalf("%s: add it to this test's values", name)
			}
			if v, ok := counts[[2]string{op, r}]; !ok || v != 0 {
				t.Errorf("from New: %s %s: %g (series there: %v), want 0", op, r, v, ok)
			}
		}
	}
	if len(counts) != len(ops)*len(results) {
		t.Errorf("from New: %d series, want %d: %v", len(counts), len(ops)*len(results), counts)
	}

	m.DatabaseCall(httpadmit.OpRenewLeases, time.Millisecond, &ratelimit.LeaseLostError{})
	if v := operationCounts(t, reg)[[2]string{httpadmit.OpRenewLeases, ResultLeaseLost}]; v != 1 {
		t.Errorf("after a lease lost: %g, want 1", v)
	}
}

// operationCounts is pgadmit_db_operations_total in reg, by operation and
// result.
func operationCounts(t *testing.T, reg *prometheus.Registry) map[[2]string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[[2]string]float64{}
	for _, f := range families {
		if f.GetName() != "pgadmit_db_operations_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if f.GetType() != dto.MetricType_COUNTER || len(labels) != 2 {
				t.Errorf("%v %v: want a counter by operation and result", f.GetType(), labels)
			}
			counts[[2]string{labels["operation"], labels["result"]}] = s.GetCounter().GetValue()
		}
	}
	return counts
}
