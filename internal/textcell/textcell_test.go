package textcell_test

import (
	"testing"

	"github.com/pgadmit/pgadmit/internal/textcell"
)

func TestShow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"team-42", "team-42"},
		{"équipe:42 ✓", "équipe:42 ✓"},
		{"東京", "東京"},
		{"a b", "a b"},
		{"evil\nkey", `"evil\nkey"`},
		{"tab\there", `"tab\there"`},
		{"\x1b[31mred", `"\x1b[31mred"`},
		{"rtl\u202e", `"rtl\u202e"`},
		{"nbsp\u00a0", `"nbsp\u00a0"`},
		{"\xff", `"\xff"`},
		{`"quoted"`, `"\"quoted\""`},
		{`mid"quote`, `mid"quote`},
		{"", ""},
	} {
		if got := textcell.Show(c.in); got != c.want {
			t.Errorf("Show(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
