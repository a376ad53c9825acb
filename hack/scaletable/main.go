// Command scaletable writes the scale benchmark's figures into the docs:
// it reads the File `make bench-scale` wrote (e2e/scale/figures) and
// rewrites every generated block of the documents it is given
// (<!-- BEGIN GENERATED: name --> … <!-- END GENERATED: name -->).
//
//	go run ./hack/scaletable -json docs/scale/results.json docs/scale.md README.md
//
// (`make docs-figures`; `make bench-scale` runs it after a run that wrote
// the default file.) hack/docscheck fails when a block is not what this
// writes.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/openmed/openmed-operator/e2e/scale/figures"
)

func main() {
	path := flag.String("json", figures.JSONPath, "the benchmark's figures")
	flag.Parse()
	if err := run(*path, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "scaletable:", err)
		os.Exit(1)
	}
}

func run(path string, docs []string) error {
	f, err := figures.Read(path)
	if err != nil {
		return err
	}
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			return err
		}
		out, names, err := figures.Regenerate(string(data), f)
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
