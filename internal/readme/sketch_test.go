package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strings"
	"testing"
)

// The code sketches of the package comments (what go doc shows first) and
// the README's one-line Go blocks are not Example bodies: each must compile,
// and pass go vet, pasted as the body of a function that has what the
// sketch names from around it (ctx, pool, limiter, ...) as parameters and
// returns an error, under the imports it needs. A sketch that ignores an
// error it declares, or never settles what it took, is one a newcomer pastes.
func TestSketchesCompileWhenPasted(t *testing.T) {
	t.Parallel()
	for _, sketch := range []struct {
		name, code, imports, params string
	}{{
		name: "package ratelimit",
		code: DocBlock(t, "../../ratelimit", "limiter := ratelimit.New(pool)"),
		imports: `"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/ratelimit"`,
		params: "ctx context.Context, pool *pgxpool.Pool, taskID string, limits []ratelimit.Limit, usedTokens float64",
	}, {
		name: "package httpadmit",
		code: DocBlock(t, "../../httpadmit", "mw, err := httpadmit.New("),
		imports: `"net/http"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/ratelimit"`,
		params: "limiter *ratelimit.Limiter, upstream http.Handler, apiKeyID func(*http.Request) string",
	}, {
		name: "package promadmit",
		code: DocBlock(t, "../../promadmit", "reg := prometheus.NewRegistry()\n"),
		imports: `"context"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgadmit/pgadmit/httpadmit"
	"github.com/pgadmit/pgadmit/promadmit"
	"github.com/pgadmit/pgadmit/ratelimit"`,
		params: "ctx context.Context, pool *pgxpool.Pool, limiter *ratelimit.Limiter, limits httpadmit.LimitsFunc, upstream http.Handler",
	}, {
		name: "package schema",
		code: DocBlock(t, "../../schema", "pool, err := pgxpool.New("),
		imports: `"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/schema"`,
		params: "ctx context.Context",
	}, {
		name: "the README's migration line",
		code: Block(t, "../../README.md", "", "if err := schema.Migrate(ctx, pool); err != nil { // at service start-up"),
		imports: `"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadmit/pgadmit/schema"`,
		params: "ctx context.Context, pool *pgxpool.Pool",
	}, {
		name: "the README's logged prune",
		code: Block(t, "../../README.md", "", "res, err := maint.Prune(ctx, 24*time.Hour)"),
		imports: `"context"
	"log"
	"time"

	"github.com/pgadmit/pgadmit/ratelimit"`,
		params: "ctx context.Context, maint *ratelimit.Maintenance",
	}} {
		t.Run(strings.ReplaceAll(sketch.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			body := sketch.code
			if !endsInReturn(body) { // the function would go on; nothing the sketch left is used
				body += "return nil\n"
			}
			Vet(t, "package main\n\nimport (\n\t"+sketch.imports+"\n)\n\nfunc main() {}\n\n"+
				"func sketch("+sketch.params+") error {\n"+Indent(body)+"}\n")
		})
	}
}

// endsInReturn reports whether code, the body of a function, ends with a
// return statement.
func endsInReturn(code string) bool {
	body := parseBody(code)
	if body == nil || len(body.List) == 0 {
		return false
	}
	_, ok := body.List[len(body.List)-1].(*ast.ReturnStmt)
	return ok
}

// parseBody parses code as the body of a function; nil when it does not
// parse (go vet then says why).
func parseBody(code string) *ast.BlockStmt {
	file, err := parser.ParseFile(token.NewFileSet(), "sketch.go", "package p\n\nfunc _() {\n"+code+"}\n", parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	return file.Decls[0].(*ast.FuncDecl).Body
}

// Every Go block of the README, and of the pages moved out of it (docs/cli.md, docs/dba.md,
// which hold none today), is held to code that compiles by a test: a new block needs one (here,
// or as the body of an Example) before it is added to its file's list.
func TestEveryReadmeGoBlockIsChecked(t *testing.T) {
	t.Parallel()
	checked := map[string][]string{
		"README.md": {
			"import (\n", // ratelimit: TestReadmeShowsTheRunnableQuickstart
			"// The gateway: one unfinished task at a time for this key.\n",            // ratelimit: TestReadmeShowsTheRunnableTaskFlow
			"limiter := ratelimit.New(pool)\ndefer limiter.Close()",                    // httpadmit: TestReadmeShowsTheRunnableExample
			"if err := schema.Migrate(ctx, pool); err != nil { // at service start-up", // TestSketchesCompileWhenPasted
			"res, err := maint.Prune(ctx, 24*time.Hour)",                               // TestSketchesCompileWhenPasted
		},
		"docs/cli.md": nil,
		"docs/dba.md": nil,
	}
	for file, firsts := range checked {
		blocks := strings.Split(readText(t, "../../"+file), "```go\n")[1:]
		if len(blocks) == 0 && file == "README.md" {
			t.Error("README.md has no Go block")
		}
		for _, block := range blocks {
			if !slices.ContainsFunc(firsts, func(first string) bool { return strings.HasPrefix(block, first) }) {
				first, _, _ := strings.Cut(block, "\n")
				t.Errorf("%s has a Go block that no test compiles, starting %q", file, first)
			}
		}
	}
}
