package readme

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The README's table of ratios (the lowest and the highest run of all the
// days, and the latest day's range), the days its text says the table
// covers, and its sentence on the runs that took W3 past 10x summarise the
// performance log's table of ratios day by day, which each day extends: a
// day added to the log and not to them leaves them behind (the sentence
// said "four runs" from day 49 on, past the 10x of days 52 and 54).
func TestReadmeRatiosAreThePerformanceLogs(t *testing.T) {
	t.Parallel()
	for _, problem := range ratioProblems(readText(t, "../../README.md"), readText(t, "../../docs/performance.md")) {
		t.Error(problem)
	}
}

func TestRatioProblemsFindsEachDrift(t *testing.T) {
	t.Parallel()
	log := "## Ratios day by day\n\n" +
		"| day | W1 window | W3 hot key, 16 workers | runs |\n| --- | --- | --- | --- |\n" +
		"| target | ≥ 2x | ≥ 10x |  |\n" +
		"| before (`f9f2e02`) | 0.43x | 0.78x |  |\n" +
		"| 1 | 1.83–2.17x | 5.23–7.32x |  |\n" +
		"| 2 | 1.46x | **8.09–10.85x** | 3, the first of day 1's code |\n" +
		"| 3 | 2.00–3.66x | 9.10–10.14x | 2 |\n\n## Next\n"
	readme := func(w1, w3, sentence string) string {
		return "Ratios: the lowest and the highest run of days 1 to 3, then the latest day's range.\n\n" +
			"| workload | target | before | lowest run | highest run | day 3² |\n| --- | --- | --- | --- | --- | --- |\n" +
			w1 + "\n" + w3 + "\n\nCombining " + sentence + "; every other run gave 5.23–9.95x.\n"
	}
	w1 := "| W1 window | ≥ 2x | 0.43x | 1.46x (day 2) | 3.66x (day 3)¹ | 2.00–3.66x |"
	w3 := "| W3 hot key, 16 workers | ≥ 10x | 0.78x | 5.23x (day 1) | 10.85x (day 2) | 9.10–10.14x |"
	tenX := "reaches 10x on a hot key in two runs of all these days (10.85x on day 2, 10.14x on day 3)"
	for _, c := range []struct {
		readme, want string
	}{
		{readme(w1, w3, tenX), ""},
		{strings.Replace(readme(w1, w3, tenX), "day 3²", "day 2²", 1),
			"README.md's ratio table ends at day 2; the performance log's at day 3"},
		{strings.Replace(readme(w1, w3, tenX), "days 1 to 3", "days 1 to 2", 1),
			"README.md says its table has the lowest and the highest run of days 1 to 2; the performance log's table ends at day 3"},
		{readme(strings.Replace(w1, "1.46x (day 2)", "1.83x (day 1)", 1), w3, tenX),
			"README.md's lowest run of W1 window is 1.83x (day 1); the performance log's is 1.46x (day 2)"},
		{readme(strings.Replace(w1, "3.66x (day 3)¹", "3.66x (day 2)", 1), w3, tenX),
			"README.md's highest run of W1 window is 3.66x (day 2); the performance log's is 3.66x (day 3)"},
		{readme(w1, strings.Replace(w3, "| 9.10–10.14x |", "| 8.09–10.85x |", 1), tenX),
			"README.md's day 3 of W3 hot key, 16 workers is 8.09–10.85x; the performance log's is 9.10–10.14x"},
		{readme(w1, strings.Replace(w3, "0.78x", "0.80x", 1), tenX),
			"README.md's target and before of W3 hot key, 16 workers are ≥ 10x and 0.80x; the performance log's ≥ 10x and 0.78x"},
		{readme(w1, "", tenX), "README.md's ratio table has the workloads [W1 window]; the performance log's [W1 window W3 hot key, 16 workers]"},
		{readme(w1, w3, "reaches 10x on a hot key in one run of all these days (10.85x on day 2)"),
			"README.md names the runs of W3 past 10x on days [2]; the performance log's W3 passed 10x on days [2 3]"},
		{readme(w1, w3, "reaches 10x on a hot key in three runs of all these days (10.85x on day 2, 10.14x on day 3)"),
			"README.md says W3 passed 10x in three runs, and names 2"},
		{readme(w1, w3, "reaches 10x on a hot key in two runs of all these days (10.85x on day 2, 10.24x on day 3)"),
			"README.md names no run of 10.14x on day 3, the performance log's best W3 run that day"},
		{readme(w1, w3, "does not reach 10x"), "README.md does not say in how many runs W3 reached 10x"},
	} {
		got := strings.Join(ratioProblems(c.readme, log), "\n")
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("ratioProblems = %q, want %q", got, c.want)
		}
	}

	// The log's table itself: a row out of step with its header, a row that
	// is no day, and the days out of order.
	good := readme(w1, w3, tenX)
	for _, c := range []struct {
		log, want string
	}{
		{strings.Replace(log, "| 2 | 1.46x |", "| 2 |", 1),
			"the performance log's ratio table has 3 cells in its row 2; its header 4"},
		{strings.Replace(log, "| before (`f9f2e02`) |", "| bfore |", 1),
			"the performance log's ratio table has a row bfore, neither target, before nor a day"},
		{strings.Replace(log, "| 3 | 2.00–3.66x |", "| 4 | 2.00–3.66x |", 1),
			"the performance log's ratio table has day 4 after day 2"},
	} {
		got := strings.Join(ratioProblems(good, c.log), "\n")
		if !strings.Contains(got, c.want) {
			t.Errorf("ratioProblems = %q, want %q", got, c.want)
		}
	}
}

var (
	ratioCell     = regexp.MustCompile(`\d+\.\d+`)
	readmeRatioAt = regexp.MustCompile(`^(\d+\.\d+)x \(day (\d+)\)`)
	readmeLastDay = regexp.MustCompile(`^day (\d+)`)
	logDay        = regexp.MustCompile(`^\d+$`)
	readmeDays    = regexp.MustCompile(`lowest\s+and\s+the\s+highest\s+run\s+of\s+days\s+1\s+to\s+(\d+)`)
	readmeTenX    = regexp.MustCompile(`reaches\s+10x\s+on\s+a\s+hot\s+key\s+in\s+(\w+)\s+runs?\s+of\s+all\s+these\s+days\s+\(([^)]*)\)`)
	tenXRun       = regexp.MustCompile(`(\d+\.\d+)x(?:\s+and\s+(\d+\.\d+)x)?\s+on\s+day\s+(\d+)`)
	countWords    = []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
		"eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"}
)

// ratioRow is a workload's ratios: a row of the README's table (its target,
// its ratio before, then the lowest run, the highest and the latest day) or
// a column of the log's (its target, its ratio before, then a cell a day).
type ratioRow struct {
	name, target, before string
	cells                []string
}

// ratioTable returns the rows of the first table of text whose header
// starts "| workload | target | before |" (the README's) and the cells of
// that header after those three.
func ratioTable(text string) (header []string, rows []ratioRow) {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, "| workload | target | before |") {
			continue
		}
		header = tableCells(line)[3:]
		for _, row := range lines[i+2:] {
			if !strings.HasPrefix(row, "|") {
				break
			}
			cells := tableCells(row)
			if len(cells) < 3 {
				continue
			}
			rows = append(rows, ratioRow{cells[0], cells[1], cells[2], cells[3:]})
		}
		return header, rows
	}
	return nil, nil
}

// dayTable returns the days of the log's table of ratios, the first table of
// text whose header starts "| day |" (then a column a workload and a last
// one "runs"), and each workload's column as a ratioRow: its target and
// before from the rows "target" and "before (...)", then a cell a day. The
// problems are rows that do not fit that shape.
func dayTable(text string) (days []string, rows []ratioRow, problems []string) {
	lines := strings.Split(text, "\n")
	i := slices.IndexFunc(lines, func(line string) bool { return strings.HasPrefix(line, "| day |") })
	if i < 0 || i+2 > len(lines) {
		return nil, nil, nil
	}
	header := tableCells(lines[i])
	names := header[1:]
	if n := len(names); n > 0 && names[n-1] == "runs" {
		names = names[:n-1]
	}
	for _, name := range names {
		rows = append(rows, ratioRow{name: name})
	}
	for _, line := range lines[i+2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := tableCells(line)
		if len(cells) != len(header) {
			problems = append(problems, fmt.Sprintf("the performance log's ratio table has %d cells in its row %s; its header %d",
				len(cells), cells[0], len(header)))
			continue
		}
		label := cells[0]
		switch {
		case label == "target":
			for j := range rows {
				rows[j].target = cells[1+j]
			}
		case strings.HasPrefix(label, "before"):
			for j := range rows {
				rows[j].before = cells[1+j]
			}
		case logDay.MatchString(label):
			// The latest day is the last row: each day follows the one
			// before it.
			if want := strconv.Itoa(len(days) + 1); label != want {
				previous := "no day"
				if len(days) > 0 {
					previous = "day " + days[len(days)-1]
				}
				problems = append(problems, fmt.Sprintf("the performance log's ratio table has day %s after %s", label, previous))
			}
			days = append(days, label)
			for j := range rows {
				rows[j].cells = append(rows[j].cells, cells[1+j])
			}
		default:
			problems = append(problems, fmt.Sprintf("the performance log's ratio table has a row %s, neither target, before nor a day", label))
		}
	}
	return days, rows, problems
}

// tableCells returns the trimmed cells of a Markdown table row.
func tableCells(row string) []string {
	cells := strings.Split(strings.Trim(strings.TrimSpace(row), "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// ratios returns the ratios a cell of the log's table holds: "2.74–3.08x"
// is [2.74 3.08], "**8.41–8.48x**" [8.41 8.48], "1.06x" [1.06].
func ratios(cell string) []float64 {
	var values []float64
	for _, s := range ratioCell.FindAllString(cell, -1) {
		v, err := strconv.ParseFloat(s, 64)
		if err == nil {
			values = append(values, v)
		}
	}
	return values
}

// ratioProblems returns where the README's ratio table and its sentence on
// the runs past 10x part from the performance log's table of ratios day by
// day.
func ratioProblems(readme, log string) []string {
	_, section, ok := strings.Cut(log, "## Ratios day by day\n")
	if !ok {
		return []string{"the performance log has no ## Ratios day by day section"}
	}
	section, _, _ = strings.Cut(section, "\n## ")
	days, logRows, problems := dayTable(section)
	if len(days) == 0 || len(logRows) == 0 {
		return append(problems, "the performance log's ## Ratios day by day has no table of ratios (day, a column a workload, runs)")
	}
	lastDay := days[len(days)-1]
	header, readmeRows := ratioTable(readme)
	if len(header) != 3 {
		return append(problems, "README.md has no ratio table (workload, target, before, lowest run, highest run, the latest day)")
	}

	latest := header[2] // "day 57²"
	if m := readmeLastDay.FindStringSubmatch(latest); m != nil {
		latest = "day " + m[1]
	}
	if latest != "day "+lastDay {
		problems = append(problems, fmt.Sprintf("README.md's ratio table ends at %s; the performance log's at day %s", latest, lastDay))
	}
	if m := readmeDays.FindStringSubmatch(readme); m == nil || m[1] != lastDay {
		said := "no \"lowest and the highest run of days 1 to N\""
		if m != nil {
			said = "the lowest and the highest run of days 1 to " + m[1]
		}
		problems = append(problems, fmt.Sprintf("README.md says its table has %s; the performance log's table ends at day %s", said, lastDay))
	}
	var logNames, readmeNames []string
	byName := map[string]ratioRow{}
	for _, row := range logRows {
		logNames = append(logNames, row.name)
		byName[row.name] = row
	}
	for _, row := range readmeRows {
		readmeNames = append(readmeNames, row.name)
		logRow, ok := byName[row.name]
		if !ok || len(row.cells) != 3 {
			continue // told below, with the lists
		}
		if row.target != logRow.target || row.before != logRow.before {
			problems = append(problems, fmt.Sprintf("README.md's target and before of %s are %s and %s; the performance log's %s and %s",
				row.name, row.target, row.before, logRow.target, logRow.before))
		}
		// The lowest and the highest run of all the days, each with a day
		// that had it.
		low, high := -1.0, -1.0
		var lowDays, highDays []string
		for i, cell := range logRow.cells {
			values := ratios(cell)
			if len(values) == 0 {
				continue
			}
			day := days[i]
			if v := slices.Min(values); low < 0 || v < low {
				low, lowDays = v, []string{day}
			} else if v == low {
				lowDays = append(lowDays, day)
			}
			if v := slices.Max(values); v > high {
				high, highDays = v, []string{day}
			} else if v == high {
				highDays = append(highDays, day)
			}
		}
		for _, c := range []struct {
			what, cell string
			value      float64
			days       []string
		}{{"lowest", row.cells[0], low, lowDays}, {"highest", row.cells[1], high, highDays}} {
			m := readmeRatioAt.FindStringSubmatch(c.cell)
			if m == nil || m[1] != strconv.FormatFloat(c.value, 'f', 2, 64) || !slices.Contains(c.days, m[2]) {
				problems = append(problems, fmt.Sprintf("README.md's %s run of %s is %s; the performance log's is %.2fx (day %s)",
					c.what, row.name, c.cell, c.value, strings.Join(c.days, ", day ")))
			}
		}
		if last := strings.Trim(logRow.cells[len(logRow.cells)-1], "*"); row.cells[2] != last {
			problems = append(problems, fmt.Sprintf("README.md's %s of %s is %s; the performance log's is %s", latest, row.name, row.cells[2], last))
		}
	}
	if !slices.Equal(readmeNames, logNames) {
		problems = append(problems, fmt.Sprintf("README.md's ratio table has the workloads %v; the performance log's %v", readmeNames, logNames))
	}

	// The runs of W3 with 16 workers past 10x: every day whose best run
	// passed it is named, with that run.
	w3, ok := byName["W3 hot key, 16 workers"]
	if !ok {
		return append(problems, "the performance log's table has no row W3 hot key, 16 workers")
	}
	m := readmeTenX.FindStringSubmatch(readme)
	if m == nil {
		return append(problems, "README.md does not say in how many runs W3 reached 10x (\"reaches 10x on a hot key in N runs of all these days (...)\")")
	}
	named := map[string][]string{} // day: the runs the README names
	var namedDays []string
	runs := 0
	for _, run := range tenXRun.FindAllStringSubmatch(m[2], -1) {
		day := run[3]
		namedDays = append(namedDays, day)
		named[day] = append(named[day], run[1])
		runs++
		if run[2] != "" {
			named[day] = append(named[day], run[2])
			runs++
		}
	}
	if i := slices.Index(countWords, m[1]); i != runs {
		problems = append(problems, fmt.Sprintf("README.md says W3 passed 10x in %s runs, and names %d", m[1], runs))
	}
	var passed []string
	for i, cell := range w3.cells {
		values := ratios(cell)
		if len(values) == 0 || slices.Max(values) < 10 {
			continue
		}
		day := days[i]
		passed = append(passed, day)
		if best := strconv.FormatFloat(slices.Max(values), 'f', 2, 64); named[day] != nil && !slices.Contains(named[day], best) {
			problems = append(problems, fmt.Sprintf("README.md names no run of %sx on day %s, the performance log's best W3 run that day", best, day))
		}
	}
	if !slices.Equal(namedDays, passed) {
		problems = append(problems, fmt.Sprintf("README.md names the runs of W3 past 10x on days %v; the performance log's W3 passed 10x on days %v", namedDays, passed))
	}
	return problems
}
