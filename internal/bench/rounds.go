package bench

// Steadiness compares a workload's last round with its first: a ratio well below 1 means that
// admissions slowed down as the tables grew.
type Steadiness struct {
	Workload      string  `json:"workload"` // the workload's name, e.g. "W2 gateway request"
	Rounds        int     `json:"rounds"`
	FirstOpsPerS  float64 `json:"first_ops_per_s"`
	LastOpsPerS   float64 `json:"last_ops_per_s"`
	LastOverFirst float64 `json:"last_over_first"` // 0 when the first round did nothing
}

// Code returns the workload code that starts the workload's name.
func (s Steadiness) Code() string { return Result{Name: s.Workload}.Code() }

// Steady returns, for each workload that ran more than one round in results (as Run returns
// them), its first and last round's throughput, in the order the workloads first ran.
func Steady(results []Result) []Steadiness {
	var out []Steadiness
	at := map[string]int{}
	for _, r := range results {
		i, ok := at[r.Name]
		if !ok {
			at[r.Name] = len(out)
			out = append(out, Steadiness{Workload: r.Name, Rounds: 1, FirstOpsPerS: r.OpsPerS, LastOpsPerS: r.OpsPerS})
			continue
		}
		out[i].Rounds++
		out[i].LastOpsPerS = r.OpsPerS
	}
	kept := out[:0]
	for _, s := range out {
		if s.Rounds < 2 {
			continue
		}
		if s.FirstOpsPerS > 0 {
			s.LastOverFirst = s.LastOpsPerS / s.FirstOpsPerS
		}
		kept = append(kept, s)
	}
	return kept
}
