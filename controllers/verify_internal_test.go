package controllers

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmed/openmed-operator/pkg/rollout"
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

// TestVerifierAsksOncePerVerdict: a pod queued or being asked is not queued
// again; once its verdict is written, a pass that planned it on a view of
// the pod store older than that verdict is not served (the store had not
// shown it yet), and one whose view shows the verdict is (a bake's next
// request).
func TestVerifierAsksOncePerVerdict(t *testing.T) {
	v := newVerifier(nil, nil, "test", nil, time.Now)
	model := types.NamespacedName{Namespace: "ns", Name: "m"}
	pod := rollout.PodVerification{Pod: "p", IP: "10.0.0.1", Port: 8080}
	queued := func() int {
		n := 0
		for {
			select {
			case <-v.jobs:
				n++
			default:
				return n
			}
		}
	}
	if !v.enqueue(model, "uid", "", nil, []rollout.PodVerification{pod}) || !v.enqueue(model, "uid", "", nil, []rollout.PodVerification{pod}) {
		t.Fatal("enqueue refused")
	}
	if n := queued(); n != 1 {
		t.Fatalf("a pod planned by two passes while it is asked was queued %d times, want 1", n)
	}
	probed := metav1.NewTime(time.Now().Truncate(time.Second))
	v.done(types.NamespacedName{Namespace: "ns", Name: "p"}, probed)
	v.enqueue(model, "uid", "", nil, []rollout.PodVerification{pod})
	if n := queued(); n != 0 {
		t.Fatalf("a pass that did not see the written verdict queued the pod %d times, want 0", n)
	}
	seen := pod
	seen.Was, seen.Probed = corev1.ConditionTrue, probed
	v.enqueue(model, "uid", "", nil, []rollout.PodVerification{seen})
	if n := queued(); n != 1 {
		t.Fatalf("a pass that saw the verdict (the bake asks again) queued the pod %d times, want 1", n)
	}
}
