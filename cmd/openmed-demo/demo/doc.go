// Package demo holds the pieces `make run` (the openmed-demo command) and the
// end-to-end tests share: building and running the openmed-operator binary as
// a process of its own, a kubeconfig that acts as the operator's
// ServiceAccount, installing the kustomize bundle without the in-cluster
// manager, reading the example objects, and a one-line view of an
// OpenMedModel's state as a person, Argo CD and Flux each see it.
package demo
