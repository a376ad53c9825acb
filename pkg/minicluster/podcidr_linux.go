package minicluster

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
)

// lockPodRange holds a pod range by binding a Unix socket in the abstract
// namespace, named after the range. The abstract namespace belongs to the
// network namespace, as lo and its addresses do, so the lock covers exactly
// the processes that could reach the range; it leaves no file behind and
// the kernel drops it when the process dies. The components do not inherit
// it: Go opens every socket close-on-exec.
func lockPodRange(prefix netip.Prefix) (io.Closer, error) {
	l, err := net.Listen("unix", "@openmed.ai/minicluster/pod-cidr/"+prefix.String())
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, errPodRangeTaken
	}
	return l, err
}
