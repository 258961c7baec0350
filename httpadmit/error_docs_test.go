package httpadmit_test

import (
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// Every exported error type says, in its own doc, how a caller finds it,
// as ratelimit's do: with errors.As, or errors.Is with its sentinel.
// UnavailableError left it to its Is method, which go doc shows apart.
func TestErrorTypesSayHowToMatchThem(t *testing.T) {
	t.Parallel()
	docs, err := gosrc.ErrorTypeDocs(".")
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range docs {
		if !strings.Contains(doc, "errors.As") {
			t.Errorf("the doc of %s does not say to find it with errors.As:\n%s", name, doc)
		}
	}
	if len(docs) < 1 {
		t.Errorf("found no exported error type, want UnavailableError")
	}
}
