// Package localrun runs the operator against a cluster from outside it: the
// pieces `make run` (the openmed-demo command), the end-to-end suites, the
// fault and scale suites and the health-fixture capture share. It builds and
// runs the openmed-operator binary as a process of its own, writes a
// kubeconfig that acts as the operator's ServiceAccount, installs the
// kustomize bundle without the in-cluster manager and reads the example
// objects. (The one-line view of a model as a person, Argo CD and Flux see
// it is the demo's: cmd/openmed-demo.)
package localrun
