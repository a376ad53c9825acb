package version

import (
	"reflect"
	"runtime"
	"runtime/debug"
	"testing"
)

// TestResolve: a value the linker set wins; otherwise the go command's
// build information (the main module's version, vcs.revision and
// vcs.modified) fills it in; without either, the defaults.
func TestResolve(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{
			Main:     debug.Module{Path: "github.com/openmed/openmed-operator", Version: "v0.2.1-0.20260101000000-0123456789ab"},
			Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}},
		}
	}
	for _, tc := range []struct {
		name                    string
		version, commit         string
		bi                      *debug.BuildInfo
		wantVersion, wantCommit string
	}{
		{name: "set by the linker", version: "v0.2.0", commit: "abc", bi: vcs("false"), wantVersion: "v0.2.0", wantCommit: "abc"},
		{name: "from the go command's stamp", version: DefaultVersion, commit: DefaultCommit, bi: vcs("false"),
			wantVersion: "v0.2.1-0.20260101000000-0123456789ab", wantCommit: rev},
		{name: "a dirty tree", version: DefaultVersion, commit: DefaultCommit, bi: vcs("true"),
			wantVersion: "v0.2.1-0.20260101000000-0123456789ab", wantCommit: rev + "-dirty"},
		{name: "only the commit set", version: DefaultVersion, commit: "abc", bi: vcs("true"),
			wantVersion: "v0.2.1-0.20260101000000-0123456789ab", wantCommit: "abc"},
		{name: "no VCS stamp", version: DefaultVersion, commit: DefaultCommit,
			bi:          &debug.BuildInfo{Main: debug.Module{Path: "github.com/openmed/openmed-operator", Version: "(devel)"}},
			wantVersion: DefaultVersion, wantCommit: DefaultCommit},
		{name: "no build information", version: DefaultVersion, commit: DefaultCommit, wantVersion: DefaultVersion, wantCommit: DefaultCommit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := resolve(tc.version, tc.commit, tc.bi)
			want := Info{Version: tc.wantVersion, Commit: tc.wantCommit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if got != want {
				t.Errorf("resolve = %+v, want %+v", got, want)
			}
		})
	}
}

// TestUserAgent: the product token stays the program's name (the API
// server's field manager of a write without one), and a version or commit
// set by hand cannot make the header invalid.
func TestUserAgent(t *testing.T) {
	i := Info{Version: "v0.2.0", Commit: "abc", Platform: "linux/amd64"}
	if got, want := i.UserAgent("openmed-operator"), "openmed-operator/v0.2.0 (linux/amd64) abc"; got != want {
		t.Errorf("UserAgent = %q, want %q", got, want)
	}
	i = Info{Version: "v0.2.0 rc\n1", Commit: "a\tbé", Platform: "linux/amd64"}
	if got, want := i.UserAgent("openmed-operator"), "openmed-operator/v0.2.0_rc_1 (linux/amd64) a_b_"; got != want {
		t.Errorf("UserAgent = %q, want %q", got, want)
	}
}

// TestLinkerSymbols: the symbols a release build passes to -X name this
// package's variables (a wrong name is silently ignored by the linker).
func TestLinkerSymbols(t *testing.T) {
	pkg := reflect.TypeFor[Info]().PkgPath()
	if VersionVar != pkg+".Version" || CommitVar != pkg+".Commit" {
		t.Errorf("VersionVar %q, CommitVar %q; the package is %q", VersionVar, CommitVar, pkg)
	}
}
