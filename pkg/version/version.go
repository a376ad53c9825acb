// Package version is the version and commit the operator and the kubectl
// plugin were built from: what `openmed-operator --version` and `kubectl
// openmed version` print, the labels of the openmed_build_info metric and the
// User-Agent the operator's requests carry.
//
// A release build sets both with the linker (`make operator` and `make
// plugin` do):
//
//	go build -ldflags "-X github.com/openmed/openmed-operator/pkg/version.Version=v0.2.0 \
//	  -X github.com/openmed/openmed-operator/pkg/version.Commit=$(git rev-parse HEAD)" ./cmd/openmed-operator
//
// VersionVar and CommitVar are those two symbol names, for a builder that
// composes the flags in Go. Only the linker should set the variables; code
// reads them through Get.
//
// Without the flags, a binary the go command built from a checkout (`go
// build`, `go install`, `go run`) still knows its commit: Commit falls back
// to the vcs.revision the go command stamped in the build information
// (with "-dirty" when the tree had uncommitted changes), and Version to the
// main module's version when the go command knew it (`go install
// …@v0.2.0`, or a tagged checkout). A test binary and a build without VCS
// information (-buildvcs=false, or no checkout) report DefaultVersion and
// DefaultCommit.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// The symbols a build sets with `-ldflags "-X <symbol>=<value>"`.
const (
	// VersionVar is the linker symbol of Version.
	VersionVar = "github.com/openmed/openmed-operator/pkg/version.Version"
	// CommitVar is the linker symbol of Commit.
	CommitVar = "github.com/openmed/openmed-operator/pkg/version.Commit"
)

// What a build that sets neither variable, and has no build information to
// fall back on, reports.
const (
	DefaultVersion = "v0.0.0-dev"
	DefaultCommit  = "unknown"
)

// Version and Commit are set by the linker (VersionVar, CommitVar); read
// them through Get, which applies the fallbacks.
var (
	// Version is the release, for example "v0.2.0" or what `git describe`
	// says of a build between releases.
	Version = DefaultVersion
	// Commit is the full hash of the commit the binary was built from.
	Commit = DefaultCommit
)

// Info is what a binary knows of its build.
type Info struct {
	// Version is the release ("v0.2.0").
	Version string
	// Commit is the commit hash the binary was built from.
	Commit string
	// GoVersion is the Go toolchain that built it ("go1.27.3").
	GoVersion string
	// Platform is GOOS/GOARCH ("linux/amd64").
	Platform string
}

// Get returns the build's version and commit, with the fallbacks of the
// package's documentation applied.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(Version, Commit, bi)
}

// resolve applies the fallbacks: a variable the linker did not set takes
// its value from the build information bi (which may be nil).
func resolve(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return info
	}
	if version == DefaultVersion && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version
	}
	if commit == DefaultCommit {
		var revision, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if revision != "" {
			info.Commit = revision
			if modified == "true" {
				info.Commit += "-dirty"
			}
		}
	}
	return info
}

// String is the one line `--version` prints for the program named program:
// "openmed-operator v0.2.0 (commit 0123abc…, go1.27.3, linux/amd64)".
func (i Info) String(program string) string {
	return fmt.Sprintf("%s %s (commit %s, %s, %s)", program, i.Version, i.Commit, i.GoVersion, i.Platform)
}

// UserAgent is the User-Agent of program's requests to the API server:
// "openmed-operator/v0.2.0 (linux/amd64) 0123abc…". The API server names
// the field manager of a write that sets none after what precedes the
// first "/", so that stays program. Characters a header value cannot carry
// (spaces and controls in a version or commit set by hand) become "_".
func (i Info) UserAgent(program string) string {
	return fmt.Sprintf("%s/%s (%s) %s", program, token(i.Version), i.Platform, token(i.Commit))
}

// token replaces what is not a visible ASCII character.
func token(s string) string {
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' {
			return '_'
		}
		return r
	}, s)
}
