// Package minicluster runs a local Kubernetes control plane from plain
// binaries: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
// kwok, which fakes a node and the lifecycle of the pods scheduled to it. It
// needs no container runtime and no kubelet, so Deployments, ReplicaSets,
// garbage collection and namespace deletion behave as in a real cluster while
// every pod is simulated. End-to-end tests and `make run` use it.
//
// Start generates a throw-away PKI in Go, starts every component on free
// loopback ports inside a data directory, and returns once the API server is
// ready, the fake node is Ready and schedulable and the default ServiceAccount
// exists. Pods carrying the never-ready annotation (see NeverReady) become
// Running but never Ready, which lets a rollout run into its progress deadline.
// The failures of real clusters are one annotation or label away: a pod annotated
// RestartContainerAnnotation restarts the named container or native sidecar
// once, one annotated EvictAnnotation is evicted as the kubelet does under
// node pressure (phase Failed, reason Evicted), and a node created with
// NodeLabel joins the cluster, then stops heartbeating once the
// label is removed: the real node lifecycle controller marks it and its
// pods not Ready and the taint eviction controller evicts them.
//
// Pods get IPs from a range of 127.0.0.0/8 that no other cluster on the
// machine uses (Cluster.PodCIDR). Linux routes the whole of it to the
// loopback interface, so a test can listen on a pod's IP and port and play
// the server in the pod for any client that dials it. Kubernetes refuses
// loopback addresses in EndpointSlices, so Services have no endpoints.
//
// Every child process runs in its own process group and is started with a
// parent-death signal, so it dies with the process that started it even when
// that process panics or is killed with SIGKILL. Stop ends all of them and
// waits for them; StopOnSignal does so on Ctrl-C for command-line use.
//
// The binaries are built from Go modules by the project's Makefile (see
// Config for where they are looked up).
package minicluster
