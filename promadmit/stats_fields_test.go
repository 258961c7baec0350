package promadmit

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pgadmit/pgadmit/ratelimit"
)

// notExported are the fields of ratelimit's Stats (and of the results of
// Recover and Prune) that no metric carries, and why. Every other field
// is a count a metric serves: TestEveryStatsFieldIsExported and
// TestEveryMaintenanceCountIsAKind fail for a field added to ratelimit
// that no metric reads, so that it is exported or named here.
var notExported = map[string]string{
	"Stats.Local.LastError":  "free text: a label of it would be unbounded (pgadmit_local_statement_failures_total counts them; Stats().Local.LastError says why)",
	"RecoveryResult.Skipped": "the result label skipped of pgadmit_db_operations_total",
	"PruneResult.Skipped":    "the result label skipped of pgadmit_db_operations_total",
	"PruneResult.Cutoff":     "a time, not a count",
	"PruneResult.TaskCutoff": "a time, not a count",
}

// leaves are the paths of v's fields (Stats.Reserve.Batches), into structs.
func leaves(v reflect.Value, path string, visit func(path string, f reflect.Value)) {
	for i := range v.NumField() {
		p := path + "." + v.Type().Field(i).Name
		if f := v.Field(i); f.Kind() == reflect.Struct && f.Type() != reflect.TypeFor[time.Time]() {
			leaves(f, p, visit)
		} else {
			visit(p, f)
		}
	}
}

// Each count of ratelimit.Stats is served by a metric of the combining
// collector: set alone to a value of its own, some metric carries it.
func TestEveryStatsFieldIsExported(t *testing.T) {
	t.Parallel()
	c, err := NewCombiningCollector(&ratelimit.Limiter{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	leaves(reflect.ValueOf(ratelimit.Stats{}), "Stats", func(path string, _ reflect.Value) {
		if notExported[path] != "" {
			return
		}
		n++
		var s ratelimit.Stats
		var set reflect.Value
		leaves(reflect.ValueOf(&s).Elem(), "Stats", func(p string, f reflect.Value) {
			if p == path {
				set = f
			}
		})
		const want = 4242.0
		switch {
		case set.Type() == reflect.TypeFor[time.Duration]():
			set.SetInt(int64(want * float64(time.Second)))
		case set.CanInt():
			set.SetInt(int64(want))
		default:
			t.Errorf("%s (%v): neither a count nor in notExported", path, set.Type())
			return
		}
		ch := make(chan prometheus.Metric, 64)
		c.(*combining).collect(ch, s)
		close(ch)
		var carriers []string
		for m := range ch {
			var d dto.Metric
			if err := m.Write(&d); err != nil {
				t.Fatal(err)
			}
			if d.GetCounter().GetValue() == want || d.GetGauge().GetValue() == want {
				carriers = append(carriers, fmt.Sprint(m.Desc()))
			}
		}
		if len(carriers) != 1 {
			t.Errorf("%s: carried by %d metrics, want one: %v", path, len(carriers), carriers)
		}
	})
	if n < 12 {
		t.Errorf("checked %d fields of Stats", n)
	}
}

// Each count of RecoveryResult and PruneResult is a kind of
// pgadmit_recovered_total or pgadmit_pruned_total: set alone, the kinds
// sum to it.
func TestEveryMaintenanceCountIsAKind(t *testing.T) {
	t.Parallel()
	for name, kinds := range map[string]func(reflect.Value) map[string]int64{
		"RecoveryResult": func(v reflect.Value) map[string]int64 {
			return recoveredKinds(v.Interface().(ratelimit.RecoveryResult))
		},
		"PruneResult": func(v reflect.Value) map[string]int64 { return prunedKinds(v.Interface().(ratelimit.PruneResult)) },
	} {
		zero := map[string]reflect.Value{"RecoveryResult": reflect.ValueOf(ratelimit.RecoveryResult{}), "PruneResult": reflect.ValueOf(ratelimit.PruneResult{})}[name]
		leaves(zero, name, func(path string, f reflect.Value) {
			if notExported[path] != "" {
				return
			}
			if !f.CanInt() {
				t.Errorf("%s (%v): neither a count nor in notExported", path, f.Type())
				return
			}
			res := reflect.New(zero.Type()).Elem()
			res.FieldByName(path[len(name)+1:]).SetInt(7)
			sum := int64(0)
			for _, n := range kinds(res) {
				sum += n
			}
			if sum != 7 {
				t.Errorf("%s: its kinds sum to %d, want 7: no kind of its own", path, sum)
			}
		})
	}
}
