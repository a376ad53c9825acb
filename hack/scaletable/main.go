// Command scaletable writes the scale benchmark's figures into the docs:
// it rewrites every generated block of the documents it is given
// (<!-- BEGIN GENERATED: name --> … <!-- END GENERATED: name -->) from the
// File `make bench-scale` wrote that the block is rendered from
// (e2e/scale/figures: docs/scale/results.json, or
// docs/scale/verification.json for the golden request's block, or
// docs/fleet/waves.json for the fleet's), read under the repository's root.
//
//	go run ./hack/scaletable docs/scale.md README.md docs/fleet.md
//
// (`make docs-figures`; `make bench-scale` and `make bench-fleet` run it
// after a run that wrote one of those files.) hack/docscheck fails when a block is not what this
// writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/openmed/openmed-operator/e2e/scale/figures"
)

func main() {
	root := flag.String("root", ".", "the repository's root, under which the figures' files are read")
	flag.Parse()
	if err := run(*root, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "scaletable:", err)
		os.Exit(1)
	}
}

func run(root string, docs []string) error {
	read := func(path string) (*figures.File, error) { return figures.Read(filepath.Join(root, path)) }
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			return err
		}
		out, names, err := figures.Regenerate(string(data), read)
		if err != nil {
			return fmt.Errorf("%s: %w", doc, err)
		}
		if len(names) == 0 {
			return fmt.Errorf("%s holds no generated block", doc)
		}
		if out == string(data) {
			fmt.Printf("%s: %s up to date\n", doc, strings.Join(names, ", "))
			continue
		}
		if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: %s rewritten\n", doc, strings.Join(names, ", "))
	}
	return nil
}
