package controllers

import (
	"strings"
	"testing"
)

// TestRefusedIP: the verifier never dials an address no pod has, whatever
// a pod's status says (whoever may patch it can write its IP): a cloud's
// metadata service, link-local, multicast, unspecified; pod addresses of
// any range, the local control plane's loopback ones included, are dialled.
func TestRefusedIP(t *testing.T) {
	for _, tc := range []struct {
		ip     string
		refuse string
	}{
		{"10.244.1.7", ""},
		{"172.20.0.4", ""},
		{"127.77.0.5", ""},
		{"fd00:10:244::7", ""},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"metadata.google.internal", "no IP address"},
		{"", "no IP address"},
	} {
		got := refusedIP(tc.ip)
		if (tc.refuse == "") != (got == "") || !strings.Contains(got, tc.refuse) {
			t.Errorf("refusedIP(%q) = %q, want %q", tc.ip, got, tc.refuse)
		}
	}
}
