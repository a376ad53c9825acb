package minicluster

import (
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
)

// TestReservePodRange checks the ranges handed out and the lock: a range is
// held by one cluster at a time, in this process as in any other (the lock
// lives in the kernel), freed by its holder, and skipped when it holds an
// address in use.
func TestReservePodRange(t *testing.T) {
	var held []io.Closer
	t.Cleanup(func() {
		for _, l := range held {
			_ = l.Close()
		}
	})
	reserve := func(inUse ...netip.Addr) netip.Prefix {
		t.Helper()
		prefix, lock, err := reservePodRange(inUse)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lock)
		return prefix
	}

	a, b := reserve(), reserve()
	for _, p := range []netip.Prefix{a, b} {
		octets := p.Addr().As4()
		if p.Bits() != 16 || octets[0] != 127 || octets[1] == 0 || octets[1] == 255 || p.Masked() != p {
			t.Errorf("range %s: want 127.N.0.0/16 with N in 1..254", p)
		}
	}
	if a == b {
		t.Fatalf("range %s handed out twice", a)
	}
	if _, err := lockPodRange(a); !errors.Is(err, errPodRangeTaken) {
		t.Errorf("lock %s while held: got %v, want %v", a, err, errPodRangeTaken)
	}

	// Released, a is free again; with an address of every range but a in
	// use it is the only candidate, and with one of a's too there is none
	// (b and every other range hold an address in use).
	if err := held[0].Close(); err != nil {
		t.Fatal(err)
	}
	held = held[1:]
	var others []netip.Addr
	for n := 1; n <= podRanges; n++ {
		if p := podRange(n); p != a {
			others = append(others, p.Addr().Next())
		}
	}
	// The last address of a: kwok counts up from the first.
	last := a.Addr().As4()
	last[2], last[3] = 255, 254
	switch p, lock, err := reservePodRange(append(others, netip.AddrFrom4(last))); {
	case err == nil:
		_ = lock.Close()
		t.Errorf("every range in use: got %s, want no free pod range", p)
	case !strings.Contains(err.Error(), "no free pod range"):
		t.Errorf("every range in use: got %v, want no free pod range", err)
	}
	if got := reserve(others...); got != a {
		t.Errorf("with an address in use in every other range: got %s, want %s", got, a)
	}
}
