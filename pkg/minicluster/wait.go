package minicluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// waitFor polls check until it succeeds, failing early when one of procs
// exits or ctx ends.
func waitFor(ctx context.Context, what string, procs []*process, check func(context.Context) error) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("waiting for %s: %w", what, p.exitError())
			}
		}
		checkCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := check(checkCtx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last check: %v)", what, ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

func etcdHealthy(ctx context.Context, url string) error {
	body, err := get(ctx, http.DefaultClient, url)
	if err != nil {
		return err
	}
	var health struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &health); err != nil {
		return err
	}
	if health.Health != "true" {
		return fmt.Errorf("etcd reports health %q", health.Health)
	}
	return nil
}

func apiServerReady(ctx context.Context, cs kubernetes.Interface) error {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return err
	}
	if string(body) != "ok" {
		return fmt.Errorf("/readyz answered %q", body)
	}
	return nil
}

// insecureClient talks to the health endpoints of kube-controller-manager and
// kube-scheduler. They serve on loopback with a self-signed certificate made
// in memory at start-up, which nothing could verify, and /healthz reveals
// nothing and accepts anyone.
var insecureClient = &http.Client{Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
}}

// httpOK checks that url answers 200 "ok". kwok's plain-HTTP endpoint goes
// through the same client; TLS settings do not apply to it.
func httpOK(ctx context.Context, url string) error {
	body, err := get(ctx, insecureClient, url)
	if err != nil {
		return err
	}
	if string(body) != "ok" {
		return fmt.Errorf("%s answered %q", url, body)
	}
	return nil
}

func get(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return body, nil
}

// ensureNode creates the node kwok manages, unless a kept data directory
// already has it, and then drops the Lease its last run left. It carries no
// kwok taint, so pods need no toleration.
func ensureNode(ctx context.Context, cs kubernetes.Interface) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: NodeName,
		Labels: map[string]string{
			kwokNodeLabel:          "fake",
			corev1.LabelHostname:   NodeName,
			corev1.LabelOSStable:   "linux",
			corev1.LabelArchStable: "amd64",
			"type":                 "kwok",
		},
	}}
	_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// A data directory kept from an earlier version marked the node
		// with an annotation: label it, or kwok never manages it.
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"fake"}}}`, kwokNodeLabel)
		_, err = cs.CoreV1().Nodes().Patch(ctx, NodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if err == nil {
			return dropNodeLease(ctx, cs)
		}
	}
	if err != nil {
		return fmt.Errorf("create node %s: %w", NodeName, err)
	}
	return nil
}

// dropNodeLease deletes the node's Lease left by the last run. kwok runs a
// node's pods only while it holds the node's Lease, under an identity new
// at each start (host name and a UUID), so the old Lease would keep every
// new pod Pending until it expired (--node-lease-duration-seconds, 40 s).
// No one else holds it: the data directory is locked, and
// kube-controller-manager, whose node lifecycle controller reads it,
// starts after this.
func dropNodeLease(ctx context.Context, cs kubernetes.Interface) error {
	err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, NodeName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the Lease of node %s left by the last run: %w", NodeName, err)
	}
	return nil
}

// nodeSchedulable checks that the node is Ready and that the node lifecycle
// controller has removed the taints admission put on it while it was not.
func nodeSchedulable(ctx context.Context, cs kubernetes.Interface) error {
	node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready := false
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return errors.New("node is not Ready")
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return fmt.Errorf("node still has taint %s", t.Key)
		}
	}
	return nil
}

func loopback(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
