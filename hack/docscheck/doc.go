// Package docscheck holds the docs' checks, tests that `make test` runs
// with every other (`go test ./hack/docscheck`): the README's length, the
// generated blocks of the docs against the scale benchmark's figures,
// scale figures only inside those blocks, and what the docs say of the
// examples (every alert unit-tested and documented).
package docscheck
