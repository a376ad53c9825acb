package minicluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Pod IPs are loopback addresses: Linux routes all of 127.0.0.0/8 to lo, so
// a test can listen on a pod's IP and port, with no set-up and no
// privilege, and whatever dials the pod (a client on this machine, as the
// kubelet's probes or an operator would) reaches the test's server.
//
// Each cluster gets a range of its own, 127.N.0.0/16 with N from 1 to 254,
// so that clusters running side by side (go test runs packages in
// parallel) never hand out one IP twice. 127.0.0.0/16 is left out: the
// components listen on 127.0.0.1, and the system uses other addresses
// there (127.0.0.53 for systemd-resolved, 127.0.1.1 for the host name on
// Debian). 127.255.0.0/16 is left out because it holds lo's broadcast
// address. A /16 holds 65534 pods; kwok hands out addresses from the start
// of its range and never checks the end, and it gives a deleted pod's IP
// to a later pod, so what a range must hold is the pods alive at once.
//
// A range is a lock (lockPodRange) held by the process that started the
// cluster until Stop, and released by the kernel if the process dies.
//
// Kubernetes stores loopback pod IPs as it stores any other (pod status
// validation only checks the syntax), but EndpointSlice and Endpoints
// validation refuse loopback addresses (ValidateEndpointIP in
// k8s.io/kubernetes/pkg/apis/core/validation), and one such address makes
// the whole object invalid. With "endpointslice-controller" or
// "endpoints-controller" enabled (neither is in DefaultControllers), a
// Service's EndpointSlice stays empty and its Endpoints have no subsets
// once a selected pod has an IP; the controllers retry with backoff and
// record FailedToUpdateEndpointSlices or FailedToUpdateEndpoint warnings
// on the Service. So no Service here has endpoints; pod conditions and
// readiness gates do not depend on them.

const (
	// podRangeBits is the prefix length of a cluster's pod range.
	podRangeBits = 16
	// podRanges is how many ranges there are: 127.1.0.0/16 to 127.254.0.0/16.
	podRanges = 254
)

// errPodRangeTaken is what lockPodRange returns when another cluster holds
// the range.
var errPodRangeTaken = errors.New("pod range in use by another cluster")

// podRange is the n-th pod range, 127.n.0.0/16.
func podRange(n int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(n), 0, 0}), podRangeBits)
}

// reservePodCIDR picks the cluster's pod range and locks it until Stop.
//
// kwok keeps its pool of pod IPs in memory: after a restart it hands out
// its range from the start again, even the IPs of the pods it finds
// running, which it only learns when a stage next changes such a pod. So a
// cluster whose data directory is kept takes a new range at each start,
// one that holds no pod's IP.
func (c *Cluster) reservePodCIDR(ctx context.Context, l *launch) error {
	pods, err := l.clientset.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list the pods of earlier runs: %w", err)
	}
	var inUse []netip.Addr
	for _, p := range pods.Items {
		for _, ip := range p.Status.PodIPs {
			if addr, err := netip.ParseAddr(ip.IP); err == nil {
				inUse = append(inUse, addr)
			}
		}
	}
	prefix, lock, err := reservePodRange(inUse)
	if err != nil {
		return err
	}
	c.podCIDR, c.podCIDRLock = prefix, lock
	return nil
}

// ReservePodRange reserves a pod range, 127.N.0.0/16, as a cluster does
// when it starts, for a test that hands out pod IPs itself (a stand-in for
// the kubelet on a bare API server): no cluster on this machine takes the
// range until the returned Closer is closed or the process ends.
func ReservePodRange() (netip.Prefix, io.Closer, error) { return reservePodRange(nil) }

// reservePodRange locks a pod range that holds none of the addresses inUse.
// The search starts at a random range, so that a range released by a
// cluster that just stopped is seldom the next one taken: a test server
// still listening on one of its pods' IPs would answer for a pod of the
// next cluster.
func reservePodRange(inUse []netip.Addr) (netip.Prefix, io.Closer, error) {
	first := rand.IntN(podRanges)
	for i := range podRanges {
		prefix := podRange(1 + (first+i)%podRanges)
		if slices.ContainsFunc(inUse, prefix.Contains) {
			continue
		}
		lock, err := lockPodRange(prefix)
		if errors.Is(err, errPodRangeTaken) {
			continue
		}
		if err != nil {
			return netip.Prefix{}, nil, fmt.Errorf("lock pod range %s: %w", prefix, err)
		}
		return prefix, lock, nil
	}
	return netip.Prefix{}, nil, fmt.Errorf("no free pod range: each of %s to %s is held by another cluster or has a pod of this one",
		podRange(1), podRange(podRanges))
}
