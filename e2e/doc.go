// Package e2e holds the end-to-end tests of the operator: the
// openmed-operator binary runs as a process of its own against a local
// control plane (pkg/minicluster) whose real deployment controller,
// ReplicaSet controller, scheduler and garbage collector act on the
// Deployments it points at, with kwok playing the pods. The tests cover a
// rollout, an automatic rollback after ProgressDeadlineExceeded, a manual
// rollback, drift by another field manager, deletion, an operator killed
// mid-rollout, and that `make run` leaves no process behind.
//
// The binaries come from `make clusterbin`; without them the tests skip.
package e2e
