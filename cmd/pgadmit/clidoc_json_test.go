package main

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

// cliDocJSONExample returns the first ```json block of command's section of docs/cli.md, which
// holds the example of its --json document.
func cliDocJSONExample(t *testing.T, command string) string {
	t.Helper()
	_, section, ok := strings.Cut(cliDoc(t), "\n## `pgadmit "+command+"`\n")
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, found := strings.Cut(section, "\n```json\n")
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !found || !closed {
		t.Fatalf("docs/cli.md: the %s section has no ```json example", command)
	}
	return block
}

// jsonFieldPaths returns the field names of a JSON document as paths ("problems[].kind"), those
// of every element of an array merged.
func jsonFieldPaths(t *testing.T, doc []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	paths := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				paths[prefix+k] = true
				walk(prefix+k+".", e)
			}
		case []any:
			for _, e := range v {
				walk(strings.TrimSuffix(prefix, ".")+"[].", e)
			}
		}
	}
	walk("", v)
	return slices.Sorted(maps.Keys(paths))
}

// docs/cli.md's example of a --json document names every field the command writes, and no other:
// scripts read them, and a field they cannot find documented is one they cannot rely on. What
// is compared is the document of a report with every object and list filled in (the command
// writes every field, left out never), as the command marshals it.
func TestJSONExamplesOfTheCLIDocNameTheFields(t *testing.T) {
	t.Parallel()
	for command, full := range map[string]any{
		"doctor": doctorReport{Problems: []doctorProblemJSON{{}}, Pooler: &doctorPoolerJSON{}},
		"inspect": inspectReport{Windows: []inspectWindowJSON{{}}, Leases: []inspectLeaseJSON{{}}, Admissions: []inspectAdmissionJSON{{}},
			Allotments: []inspectAllotmentJSON{{}}},
	} {
		written, err := json.Marshal(full)
		if err != nil {
			t.Fatal(err)
		}
		want := jsonFieldPaths(t, written)
		got := jsonFieldPaths(t, []byte(cliDocJSONExample(t, command)))
		if !slices.Equal(got, want) {
			t.Errorf("docs/cli.md's %s --json example names the fields\n%v\nwhere %s writes\n%v", command, got, command, want)
		}
	}
}
