package readme

import (
	"os"
	"testing"
)

// readText returns the file at path (from this package's directory: "../../README.md"), failing
// t when it cannot be read.
func readText(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
