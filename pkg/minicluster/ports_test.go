package minicluster

import (
	"net"
	"os"
	"testing"
)

// TestOutsideRange checks the range ports are drawn from against the
// kernel's ephemeral range, as /proc writes it.
func TestOutsideRange(t *testing.T) {
	for _, tc := range []struct {
		name, ephemeral string
		lo, hi          int
	}{
		{"linux default: below", "32768\t60999\n", 10000, 32768},
		{"wide range: above", "12000 60000", 60001, 65536},
		{"range starts under the floor: above", "1024 50000", 50001, 65536},
		{"all ports ephemeral: none", "1024 65535", 0, 0},
		{"unreadable: none", "", 0, 0},
		{"garbage: none", "a b", 0, 0},
		{"reversed: none", "60999 32768", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := outsideRange(tc.ephemeral)
			if lo != tc.lo || hi != tc.hi {
				t.Errorf("outsideRange(%q) = [%d, %d), want [%d, %d)", tc.ephemeral, lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

// TestFreeLoopbackPorts checks that the ports differ, that a child can
// bind each, and that none is one the kernel hands out by itself.
func TestFreeLoopbackPorts(t *testing.T) {
	const n = 20
	ports, err := FreeLoopbackPorts(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != n {
		t.Fatalf("got %d ports, want %d", len(ports), n)
	}
	data, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		t.Skipf("no ephemeral range to check against: %v", err)
	}
	lo, hi := outsideRange(string(data))
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d handed out twice", p)
		}
		seen[p] = true
		if hi > lo && (p < lo || p >= hi) {
			t.Errorf("port %d is outside [%d, %d), where the kernel never picks", p, lo, hi)
		}
		l, err := net.Listen("tcp", loopback(p))
		if err != nil {
			t.Errorf("port %d cannot be bound: %v", p, err)
			continue
		}
		_ = l.Close()
	}
}
