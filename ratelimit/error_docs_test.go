package ratelimit_test

import (
	"strings"
	"testing"

	"github.com/pgadmit/pgadmit/internal/gosrc"
)

// Every exported error type says, in its own doc, how a caller finds it:
// with errors.As (it may come wrapped, as a nil connection's
// *ValidationError does), or errors.Is with its sentinel. Only the Is
// methods of six of them said so, which go doc shows apart from the type.
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
	if len(docs) < 8 {
		t.Errorf("found %d exported error types, want at least 8", len(docs))
	}
}
