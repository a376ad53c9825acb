package version_test

import (
	"fmt"

	"github.com/openmed/openmed-operator/pkg/version"
)

// The line `--version` prints and the User-Agent of the requests, for a
// build with -ldflags "-X github.com/openmed/openmed-operator/pkg/version.Version=v0.2.0
// -X github.com/openmed/openmed-operator/pkg/version.Commit=0123abc".
func ExampleInfo() {
	i := version.Info{Version: "v0.2.0", Commit: "0123abc", GoVersion: "go1.27.3", Platform: "linux/amd64"}
	fmt.Println(i.String("openmed-operator"))
	fmt.Println(i.UserAgent("openmed-operator"))
	fmt.Println("-X " + version.VersionVar + "=v0.2.0")
	// Output:
	// openmed-operator v0.2.0 (commit 0123abc, go1.27.3, linux/amd64)
	// openmed-operator/v0.2.0 (linux/amd64) 0123abc
	// -X github.com/openmed/openmed-operator/pkg/version.Version=v0.2.0
}
