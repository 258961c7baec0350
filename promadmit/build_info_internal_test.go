package promadmit

import (
	"runtime/debug"
	"testing"
)

// The version label is pgadmit's module version, wherever the build has
// it: the main module (pgadmit's own commands and tests), a dependency,
// a dependency replaced by another version, or by a directory ("(devel)",
// as Go names a main module built from its tree). A build without
// information, or without pgadmit in it, says "unknown".
func TestModuleVersion(t *testing.T) {
	t.Parallel()
	dep := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"main module in its tree", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, true, "(devel)"},
		{"main module at a version", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v1.2.3"}}, true, "v1.2.3"},
		{"dependency", &debug.BuildInfo{Main: debug.Module{Path: "example.com/gateway", Version: "(devel)"},
			Deps: []*debug.Module{dep("github.com/jackc/pgx/v5", "v5.7.0", nil), dep(modulePath, "v0.9.0", nil)}}, true, "v0.9.0"},
		{"dependency replaced by a version", &debug.BuildInfo{Main: debug.Module{Path: "example.com/gateway"},
			Deps: []*debug.Module{dep(modulePath, "v0.9.0", dep("example.com/fork/pgadmit", "v0.9.1-fix", nil))}}, true, "v0.9.1-fix"},
		{"dependency replaced by a directory", &debug.BuildInfo{Main: debug.Module{Path: "example.com/gateway"},
			Deps: []*debug.Module{dep(modulePath, "v0.9.0", dep("../pgadmit", "", nil))}}, true, "(devel)"},
		{"main module without a version", &debug.BuildInfo{Main: debug.Module{Path: modulePath}}, true, "(devel)"},
		{"not in the build", &debug.BuildInfo{Main: debug.Module{Path: "example.com/gateway"}}, true, "unknown"},
		{"no build information", nil, false, "unknown"},
	} {
		if got := moduleVersion(tc.bi, tc.ok); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
