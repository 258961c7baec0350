package textcell

import (
	"io"
	"strings"
)

// Table lines up rows of cells in columns as text/tabwriter does with a padding of two spaces
// (each column as wide as its widest cell and two spaces more, the last cell of a row as it is),
// but by Width: tabwriter counts runes, so a column after an East Asian wide character shifted
// by one for each. Its cells are text as Show returns it. The zero Table is empty.
type Table struct {
	rows [][]string
}

// Row adds a row of cells.
func (t *Table) Row(cells ...string) {
	t.rows = append(t.rows, cells)
}

// WriteTo writes the rows, a line each.
func (t *Table) WriteTo(w io.Writer) (int64, error) {
	var widths []int // of each column but the last cell of a row
	for _, row := range t.rows {
		for i := 0; i < len(row)-1; i++ {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], Width(row[i]))
		}
	}
	var b strings.Builder
	for _, row := range t.rows {
		for i, cell := range row {
			b.WriteString(cell)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-Width(cell)+2))
			}
		}
		b.WriteByte('\n')
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}
