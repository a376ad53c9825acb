package minicluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// ephemeralRangeFile holds the kernel's ephemeral port range: the ports it
// hands out for every outgoing connection and every listen on port 0.
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// FreeLoopbackPorts returns n distinct TCP ports on 127.0.0.1 that nobody
// listens on now, for processes started later to bind.
//
// Between the check and a child's bind, any process may take a port. Taking
// it from the kernel (listen on port 0) makes that likely on a busy machine:
// the kernel picks the same ephemeral range for every outgoing connection, so
// a client of the API server can hold the port when the child binds it, and
// the child exits with "address already in use". The ports are therefore
// drawn at random from below the ephemeral range (above it where the range
// starts too low), which the kernel never hands out by itself; only another
// caller binding a port by number can collide, one draw in many thousands.
// All listeners are held until every port is chosen, so the n ports differ.
func FreeLoopbackPorts(n int) ([]int, error) {
	lo, hi := unassignedRange()
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for len(ports) < n {
		l, err := listenFree(lo, hi)
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// FreeLoopbackAddrs is FreeLoopbackPorts as "127.0.0.1:port" addresses.
func FreeLoopbackAddrs(n int) ([]string, error) {
	ports, err := FreeLoopbackPorts(n)
	if err != nil {
		return nil, err
	}
	addrs := make([]string, len(ports))
	for i, p := range ports {
		addrs[i] = loopback(p)
	}
	return addrs, nil
}

// listenFree listens on a random free port in [lo, hi), or on one the
// kernel picks when the range is empty or every try is taken.
func listenFree(lo, hi int) (net.Listener, error) {
	const tries = 64
	if hi > lo {
		for range tries {
			if l, err := net.Listen("tcp", loopback(lo+rand.IntN(hi-lo))); err == nil {
				return l, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	return l, nil
}

// unassignedRange is the widest range of ports outside the kernel's
// ephemeral range and above the well-known and common service ports, or an
// empty range when the ephemeral range cannot be read.
func unassignedRange() (lo, hi int) {
	data, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		return 0, 0
	}
	return outsideRange(string(data))
}

// outsideRange is unassignedRange for the ephemeral range ephemeral, written
// as the kernel does ("32768\t60999\n"); hi is exclusive.
func outsideRange(ephemeral string) (lo, hi int) {
	const floor, top = 10000, 65536
	f := strings.Fields(ephemeral)
	if len(f) != 2 {
		return 0, 0
	}
	eLo, err1 := strconv.Atoi(f[0])
	eHi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || eLo > eHi {
		return 0, 0
	}
	below, above := eLo-floor, top-max(eHi+1, floor)
	switch {
	case below >= above && below > 0:
		return floor, eLo
	case above > 0:
		return max(eHi+1, floor), top
	}
	return 0, 0
}
