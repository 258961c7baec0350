package httpadmit

import (
	"go/ast"
	"go/parser"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pgadmit/pgadmit/internal/gosrc"
	"github.com/pgadmit/pgadmit/ratelimit"
)

var (
	// A header line of the package documentation's example, as go doc
	// shows it (indented).
	docHeaderLine = regexp.MustCompile(`(?m)^\t((?:RateLimit-Policy|RateLimit|X-Ratelimit-[A-Za-z-]+): .*)$`)
	// An item of RateLimit-Policy quoted in prose.
	docPolicyItem = regexp.MustCompile(`"tokens";q=[^\s,]*[^\s,.]`)
)

// The headers the documentation shows are those the middleware sends for
// the limits and the moment it describes (600 requests and 100,000 tokens
// a minute, 16.52 s before the window ends): the package documentation's
// example, and the RateLimit-Policy item that VendorQuotaUnitParam's doc
// quotes, which put pgadmit-qu after w where it is sent before it.
func TestDocumentedHeadersAreSent(t *testing.T) {
	t.Parallel()
	decided := time.Date(2026, 11, 30, 12, 0, 43, 480_000_000, time.UTC)
	resetAt := decided.Add(16520 * time.Millisecond)
	limits := []Limit{limit("api_key", "requests", 600, time.Minute), limit("api_key", "tokens", 100_000, time.Minute)}
	limits[1].Amount = 500
	grant := ratelimit.Grant{DecidedAt: decided, Reservations: []ratelimit.Reservation{
		{ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "requests", Window: time.Minute, Limit: 600, Amount: 1, Remaining: 599, ResetAt: resetAt},
		{ScopeType: "api_key", ScopeKey: "k-api_key", Metric: "tokens", Window: time.Minute, Limit: 100_000, Amount: 500, Remaining: 99_500, ResetAt: resetAt},
	}}
	h := http.Header{}
	setHeaders(h, DefaultHeaders, grantHeaders(limits, grant))

	_, files, err := gosrc.ParseDir(".", parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var pkgDoc, vendorDoc string
	for _, file := range files {
		if file.Doc != nil {
			pkgDoc += file.Doc.Text()
		}
	}
	for gen, spec := range gosrc.Specs(files) {
		if vs, ok := spec.(*ast.ValueSpec); ok && slices.ContainsFunc(vs.Names, func(n *ast.Ident) bool { return n.Name == "VendorQuotaUnitParam" }) {
			vendorDoc = gen.Doc.Text() + vs.Doc.Text()
		}
	}

	lines := docHeaderLine.FindAllStringSubmatch(pkgDoc, -1)
	if len(lines) < 4 {
		t.Fatalf("found %d header lines in the package documentation, want 4:\n%s", len(lines), pkgDoc)
	}
	for _, m := range lines {
		name, want, _ := strings.Cut(m[1], ": ")
		if got := h.Get(name); got != want {
			t.Errorf("the package documentation shows %s: %s\nthe middleware sends     %s: %s", name, want, name, got)
		}
	}

	items := docPolicyItem.FindAllString(vendorDoc, -1)
	if len(items) == 0 {
		t.Fatalf("VendorQuotaUnitParam's doc quotes no tokens policy:\n%s", vendorDoc)
	}
	sent := strings.Split(h.Get(HeaderRateLimitPolicy), ", ")
	for _, item := range items {
		if !slices.Contains(sent, item) {
			t.Errorf("VendorQuotaUnitParam's doc quotes the policy %s; the middleware sends %q", item, sent)
		}
	}
}
