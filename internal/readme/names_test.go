package readme

import (
	"slices"
	"testing"
)

// An import's name is its path's last element, the package's, or the one
// it is given; a major version suffix (/v5) is not a package name.
func TestImportNames(t *testing.T) {
	src := "import (\n\t\"context\"\n\t\"github.com/jackc/pgx/v5\"\n\t\"github.com/jackc/pgx/v5/pgxpool\"\n\tgoose \"github.com/pressly/goose/v3\"\n\t\"example.com/v1\"\n)\n\nfunc main() {}\n"
	want := []string{"context", "pgx", "pgxpool", "goose", "v1"}
	if got := ImportNames(t, src); !slices.Equal(got, want) {
		t.Errorf("ImportNames = %q, want %q", got, want)
	}
}
