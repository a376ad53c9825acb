package minicluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// TestCluster runs real workloads on one cluster: a Deployment rolls out, a
// rollout to never-ready pods runs into its progress deadline while the old
// pods keep serving, pods get loopback IPs a test server can listen on, and
// the garbage collector removes dependents. Then Stop must leave no process
// and no temporary directory behind.
func TestCluster(t *testing.T) {
	requireBinaries(t)
	began := time.Now()
	// Only one value stalls pods, so a pod annotated with another value must
	// still become Ready: both readiness stages get exercised.
	const stall = "never"
	const crash, crashAfter = "crash", 2 * time.Second
	c, err := Start(t.Context(), Config{
		NeverReady:      NeverReady{Annotation: NeverReadyAnnotation, Values: []string{stall}},
		CrashAfterReady: CrashAfterReady{Values: []string{crash}, After: crashAfter},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	t.Logf("cluster ready after %s", time.Since(began).Round(10*time.Millisecond))
	ids := identify(t, c.PIDs())
	if len(ids) != len(components) {
		t.Fatalf("got %d components running, want %d", len(ids), len(components))
	}

	// The kubeconfig on disk must work on its own, not just the RESTConfig.
	restCfg, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := "minicluster-test"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("deployment rolls out, then stalls on never-ready pods", func(t *testing.T) {
		deployments := cs.AppsV1().Deployments(ns)
		began := time.Now()
		if _, err := deployments.Create(ctx, testDeployment(ns), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitDeployment(t, deployments.Get, 30*time.Second, func(d *appsv1.Deployment) error {
			if !complete(d) {
				return errors.New("not complete")
			}
			return nil
		})
		t.Logf("2 replicas available after %s", time.Since(began).Round(10*time.Millisecond))

		setAnnotation := func(value string) {
			t.Helper()
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, NeverReadyAnnotation, value)
			if _, err := deployments.Patch(ctx, "model-server", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		began = time.Now()
		setAnnotation("v2")
		waitDeployment(t, deployments.Get, 30*time.Second, func(d *appsv1.Deployment) error {
			if d.Status.ObservedGeneration < 2 || !complete(d) {
				return errors.New("rollout to v2 not complete")
			}
			return nil
		})
		t.Logf("rollout to pods with another annotation value complete after %s", time.Since(began).Round(10*time.Millisecond))

		began = time.Now()
		setAnnotation(stall)
		// The deadline is 10 s; allow for a loaded machine.
		d := waitDeployment(t, deployments.Get, 40*time.Second, func(d *appsv1.Deployment) error {
			p := condition(d, appsv1.DeploymentProgressing)
			if p == nil || p.Status != corev1.ConditionFalse || p.Reason != "ProgressDeadlineExceeded" {
				return fmt.Errorf("Progressing is %+v", p)
			}
			return nil
		})
		elapsed := time.Since(began)
		t.Logf("Progressing=False/ProgressDeadlineExceeded after %s", elapsed.Round(10*time.Millisecond))
		if elapsed < 10*time.Second {
			t.Errorf("deadline exceeded after %s, before progressDeadlineSeconds passed", elapsed)
		}
		if a := condition(d, appsv1.DeploymentAvailable); a == nil || a.Status != corev1.ConditionTrue {
			t.Errorf("Available = %+v, want True while the old pods serve", a)
		}
		if d.Status.AvailableReplicas != 2 || d.Status.UpdatedReplicas != 1 {
			t.Errorf("available=%d updated=%d, want 2 and 1", d.Status.AvailableReplicas, d.Status.UpdatedReplicas)
		}

		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=model-server"})
		if err != nil {
			t.Fatal(err)
		}
		var ready, stalled int
		for _, p := range pods.Items {
			marked := p.Annotations[NeverReadyAnnotation] == stall
			switch {
			case marked && p.Status.Phase == corev1.PodRunning && !podReady(&p):
				stalled++
			case !marked && p.Status.Phase == corev1.PodRunning && podReady(&p):
				ready++
			default:
				t.Errorf("pod %s: marked=%t phase=%s ready=%t", p.Name, marked, p.Status.Phase, podReady(&p))
			}
		}
		if ready != 2 || stalled != 1 {
			t.Errorf("got %d ready old pods and %d running-not-ready new pods, want 2 and 1", ready, stalled)
		}
	})

	t.Run("a pod selected to crash restarts once after it became Ready", func(t *testing.T) {
		pods := cs.CoreV1().Pods(ns)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "crashes", Annotations: map[string]string{CrashAfterReadyAnnotation: crash}},
			Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "server", Image: "registry.invalid/model-server:1"}}},
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var readyAt time.Time
		deadline := time.Now().Add(30 * time.Second)
		for {
			p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if readyAt.IsZero() && podReady(p) {
				readyAt = time.Now()
			}
			if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > 0 {
				s := p.Status.ContainerStatuses[0]
				took := time.Since(readyAt)
				t.Logf("restarted %s after Ready", took.Round(10*time.Millisecond))
				if readyAt.IsZero() || took < crashAfter-time.Second {
					t.Errorf("restarted %s after Ready, want %s", took, crashAfter)
				}
				if term := s.LastTerminationState.Terminated; s.RestartCount != 1 || term == nil || term.Reason != "Error" || term.ExitCode != 1 || term.FinishedAt.IsZero() {
					t.Errorf("container status after the crash: %+v", s)
				}
				if !podReady(p) || p.Status.Phase != corev1.PodRunning || s.State.Running == nil {
					t.Errorf("pod after the crash: phase %s ready %t state %+v", p.Status.Phase, podReady(p), s.State)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no restart reported: %+v", p.Status)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Once: the restarted pod matches no stage again.
		time.Sleep(crashAfter + time.Second)
		if p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.Status.ContainerStatuses[0].RestartCount != 1 {
			t.Errorf("after another %s: %v %+v", crashAfter, err, p.Status.ContainerStatuses)
		}
	})

	t.Run("a named container or native sidecar restarts once; an evicted pod fails as the kubelet leaves it", func(t *testing.T) {
		pods := cs.CoreV1().Pods(ns)
		newPod := func(name string, annotations map[string]string) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
				Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
					InitContainers: []corev1.Container{
						{Name: "init", Image: "registry.invalid/init:1"},
						{Name: "mesh-proxy", Image: "registry.invalid/proxy:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
					},
					Containers: []corev1.Container{
						{Name: "server", Image: "registry.invalid/model-server:1"},
						{Name: "log-shipper", Image: "registry.invalid/shipper:1"},
					}},
			}
			if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// status returns the container or init container status named c.
		status := func(p *corev1.Pod, c string) *corev1.ContainerStatus {
			for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
				for i := range list {
					if list[i].Name == c {
						return &list[i]
					}
				}
			}
			return nil
		}
		waitPod := func(name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
			deadline := time.Now().Add(30 * time.Second)
			for {
				p, err := pods.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if cond(p) {
					return p
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s: %+v", name, what, p.Status)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		for _, c := range []string{"log-shipper", "mesh-proxy"} {
			name := "restarts-" + c
			newPod(name, map[string]string{RestartContainerAnnotation: c})
			p := waitPod(name, c+" restarted", func(p *corev1.Pod) bool { s := status(p, c); return s != nil && s.RestartCount > 0 })
			s := status(p, c)
			if term := s.LastTerminationState.Terminated; s.RestartCount != 1 || term == nil || term.Reason != "Error" || s.State.Running == nil {
				t.Errorf("%s after its restart: %+v", c, s)
			}
			for _, other := range []string{"server", "log-shipper", "mesh-proxy"} {
				if o := status(p, other); other != c && (o == nil || o.RestartCount != 0 || o.LastTerminationState.Terminated != nil || o.State.Running == nil) {
					t.Errorf("%s restarted too: %+v", other, o)
				}
			}
			if init := status(p, "init"); init == nil || init.State.Terminated == nil || init.State.Terminated.Reason != "Completed" {
				t.Errorf("the init container: %+v", init)
			}
			if !podReady(p) || p.Status.Phase != corev1.PodRunning {
				t.Errorf("pod after %s restarted: phase %s ready %t", c, p.Status.Phase, podReady(p))
			}
		}

		newPod("evicted", nil)
		waitPod("evicted", "Ready", podReady)
		patch := `{"metadata":{"annotations":{"` + EvictAnnotation + `":"true"}}}`
		if _, err := pods.Patch(ctx, "evicted", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		p := waitPod("evicted", "evicted", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		disrupted := false
		for _, c := range p.Status.Conditions {
			disrupted = disrupted || (c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "TerminationByKubelet")
		}
		if p.Status.Reason != "Evicted" || !disrupted || podReady(p) || p.DeletionTimestamp != nil {
			t.Errorf("evicted pod: reason %q disrupted %t ready %t deleting %v", p.Status.Reason, disrupted, podReady(p), p.DeletionTimestamp)
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Terminated == nil || s.State.Terminated.ExitCode != 137 {
				t.Errorf("container %s of the evicted pod: %+v", s.Name, s.State)
			}
		}
	})

	t.Run("pods get IPs of the cluster's loopback range, where a server listening is reached", func(t *testing.T) {
		prefix := c.PodCIDR()
		if octets := prefix.Addr().As4(); prefix.Bits() != 16 || octets[0] != 127 || octets[1] == 0 || octets[1] == 255 {
			t.Fatalf("PodCIDR() = %s, want 127.N.0.0/16 with N in 1..254", prefix)
		}
		d := testDeployment(ns)
		d.Name, d.Spec.Replicas = "loopback", ptr.To[int32](3)
		labels := map[string]string{"app": "loopback"}
		d.Spec.Selector.MatchLabels, d.Spec.Template.Labels = labels, labels
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var pods []corev1.Pod
		deadline := time.Now().Add(30 * time.Second)
		for len(pods) < 3 {
			list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=loopback"})
			if err != nil {
				t.Fatal(err)
			}
			pods = slices.DeleteFunc(list.Items, func(p corev1.Pod) bool { return p.Status.PodIP == "" })
			if time.Now().After(deadline) {
				t.Fatalf("%d of 3 pods have an IP after 30s", len(pods))
			}
			time.Sleep(50 * time.Millisecond)
		}
		seen := map[netip.Addr]string{}
		for _, p := range pods {
			ip, err := netip.ParseAddr(p.Status.PodIP)
			if err != nil || !prefix.Contains(ip) || len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != p.Status.PodIP {
				t.Errorf("pod %s: podIP %q podIPs %v, want one IP in %s", p.Name, p.Status.PodIP, p.Status.PodIPs, prefix)
				continue
			}
			if other, dup := seen[ip]; dup {
				t.Errorf("pods %s and %s both have IP %s", other, p.Name, ip)
			}
			seen[ip] = p.Name

			// A server on the pod's IP answers requests to that IP: the
			// body names the pod, so no other pod's server could have.
			l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
			if err != nil {
				t.Fatalf("listen on the IP of pod %s: %v", p.Name, err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, p.Name)
			}), ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { _ = srv.Close() })
			body, err := get(ctx, http.DefaultClient, "http://"+l.Addr().String()+"/")
			if err != nil || string(body) != p.Name {
				t.Errorf("GET from the server on %s (pod %s): %q, %v", l.Addr(), p.Name, body, err)
			}
		}

		// What podcidr.go says of Services: no EndpointSlice may hold a
		// loopback address.
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "loopback", Namespace: ns},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{pods[0].Status.PodIP}}},
		}
		_, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("create an EndpointSlice with the pod IP %s: got %v, want invalid: loopback", pods[0].Status.PodIP, err)
		}
	})

	t.Run("a readiness gate holds a pod unready until its condition is True, as the kubelet judges it", func(t *testing.T) {
		const gate = "example.com/verified"
		d := testDeployment(ns)
		d.Name, d.Spec.Replicas = "gated", ptr.To[int32](1)
		labels := map[string]string{"app": "gated"}
		d.Spec.Selector.MatchLabels, d.Spec.Template.Labels = labels, labels
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: gate}}
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pod := func(check func(*corev1.Pod) error) *corev1.Pod {
			t.Helper()
			var last error
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				list, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=gated"})
				if err != nil {
					t.Fatal(err)
				}
				if len(list.Items) != 1 {
					last = fmt.Errorf("%d pods", len(list.Items))
					continue
				}
				if last = check(&list.Items[0]); last == nil {
					return &list.Items[0]
				}
			}
			t.Fatalf("after 30s: %v", last)
			return nil
		}
		cond := func(p *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
			for _, c := range p.Status.Conditions {
				if c.Type == typ {
					return c.Status
				}
			}
			return ""
		}
		p := pod(func(p *corev1.Pod) error {
			if cond(p, corev1.ContainersReady) != corev1.ConditionTrue {
				return fmt.Errorf("containers not ready: %v", p.Status.Conditions)
			}
			return nil
		})
		if cond(p, corev1.PodReady) != corev1.ConditionFalse || cond(p, gate) != "" {
			t.Fatalf("a gated pod with its containers ready: %+v; want Ready False and no condition of the gate", p.Status.Conditions)
		}
		setGate := func(status corev1.ConditionStatus) {
			t.Helper()
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q}]}}`, gate, status)
			if _, err := cs.CoreV1().Pods(ns).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
				t.Fatal(err)
			}
		}
		setGate(corev1.ConditionTrue)
		pod(func(p *corev1.Pod) error {
			if cond(p, corev1.PodReady) != corev1.ConditionTrue || cond(p, gate) != corev1.ConditionTrue || cond(p, corev1.ContainersReady) != corev1.ConditionTrue {
				return fmt.Errorf("gate True: %+v", p.Status.Conditions)
			}
			return nil
		})
		gated := func(ctx context.Context, _ string, o metav1.GetOptions) (*appsv1.Deployment, error) {
			return cs.AppsV1().Deployments(ns).Get(ctx, "gated", o)
		}
		waitDeployment(t, gated, 30*time.Second, func(d *appsv1.Deployment) error {
			if d.Status.AvailableReplicas != 1 {
				return fmt.Errorf("available %d", d.Status.AvailableReplicas)
			}
			return nil
		})
		setGate(corev1.ConditionFalse)
		pod(func(p *corev1.Pod) error {
			if cond(p, corev1.PodReady) != corev1.ConditionFalse || cond(p, gate) != corev1.ConditionFalse {
				return fmt.Errorf("gate False: %+v", p.Status.Conditions)
			}
			return nil
		})
	})

	t.Run("garbage collector removes dependents", func(t *testing.T) {
		for _, policy := range []metav1.DeletionPropagation{metav1.DeletePropagationBackground, metav1.DeletePropagationForeground} {
			t.Run(string(policy), func(t *testing.T) {
				cms := cs.CoreV1().ConfigMaps(ns)
				owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "owner-"}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				dependent, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
					GenerateName: "dependent-",
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
						BlockOwnerDeletion: ptr.To(true),
					}},
				}}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				began := time.Now()
				if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil {
					t.Fatal(err)
				}
				for _, name := range []string{dependent.Name, owner.Name} {
					waitDeleted(t, func() error {
						_, err := cms.Get(ctx, name, metav1.GetOptions{})
						return err
					}, 20*time.Second)
				}
				t.Logf("owner and dependent gone after %s", time.Since(began).Round(time.Millisecond))
			})
		}
	})

	began = time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	stopped = true
	t.Logf("stopped after %s", time.Since(began).Round(time.Millisecond))
	if left := alive(ids); len(left) > 0 {
		t.Errorf("still running after Stop: %v", left)
	}
	if _, err := os.Stat(c.DataDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary data directory %s not removed: %v", c.DataDir(), err)
	}
}

// TestChildrenDieWithParent runs a program that starts a cluster, then ends
// that program with a signal and checks that no component outlives it:
// SIGKILL leaves only the parent-death signal to clean up, SIGINT goes
// through StopOnSignal.
func TestChildrenDieWithParent(t *testing.T) {
	requireBinaries(t)
	for _, tc := range []struct {
		sig syscall.Signal
		// cleaned is whether the program removes its temporary directory.
		cleaned bool
	}{
		{sig: syscall.SIGKILL},
		{sig: syscall.SIGINT, cleaned: true},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"=1")
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			rep, err := readReport(bufio.NewReader(stdout))
			if err != nil {
				_ = cmd.Process.Kill()
				t.Fatalf("helper did not report a running cluster: %v (%v)", err, cmd.Wait())
			}
			ids := identify(t, rep.PIDs)
			if len(ids) != len(components) {
				t.Fatalf("helper started %d components, want %d", len(ids), len(components))
			}

			began := time.Now()
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("helper ended with %v, want death by %s", err, tc.sig)
			}
			if ws := exit.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != tc.sig {
				t.Errorf("helper ended with %v, want death by %s", ws, tc.sig)
			}
			waitGone(t, ids, 10*time.Second)
			t.Logf("all components gone %s after %s", time.Since(began).Round(time.Millisecond), tc.sig)

			_, err = os.Stat(rep.DataDir)
			if tc.cleaned && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("temporary data directory %s not removed: %v", rep.DataDir, err)
			}
			if !tc.cleaned {
				if err := os.RemoveAll(rep.DataDir); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func testDeployment(ns string) *appsv1.Deployment {
	labels := map[string]string{"app": "model-server"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "model-server", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To[int32](2),
			ProgressDeadlineSeconds: ptr.To[int32](10),
			Selector:                &metav1.LabelSelector{MatchLabels: labels},
			// One surge pod at a time and none taken away, so a stalled
			// rollout keeps both old pods.
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
					MaxSurge:       ptr.To(intstr.FromInt32(1)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					// kwok runs no image; the registry does not exist.
					Containers: []corev1.Container{{Name: "server", Image: "registry.invalid/model-server:1"}},
				},
			},
		},
	}
}

// complete is the rollout-complete rule of `kubectl rollout status`.
func complete(d *appsv1.Deployment) bool {
	p := condition(d, appsv1.DeploymentProgressing)
	return d.Status.ObservedGeneration == d.Generation &&
		d.Status.UpdatedReplicas == *d.Spec.Replicas &&
		d.Status.Replicas == *d.Spec.Replicas &&
		d.Status.AvailableReplicas == *d.Spec.Replicas &&
		p != nil && p.Reason == "NewReplicaSetAvailable"
}

func condition(d *appsv1.Deployment, t appsv1.DeploymentConditionType) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if d.Status.Conditions[i].Type == t {
			return &d.Status.Conditions[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitDeployment polls the Deployment until check passes and returns it.
func waitDeployment(t *testing.T, get func(context.Context, string, metav1.GetOptions) (*appsv1.Deployment, error), timeout time.Duration, check func(*appsv1.Deployment) error) *appsv1.Deployment {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d, err := get(t.Context(), "model-server", metav1.GetOptions{})
		if err == nil {
			if err = check(d); err == nil {
				return d
			}
			err = fmt.Errorf("%w; status %+v", err, d.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deployment not as expected after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitDeleted polls get until it reports NotFound.
func waitDeleted(t *testing.T, get func() error, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := get()
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("object still there after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKeptDataDir covers `make run`: a data directory that is given is locked
// while in use, survives Stop, and a later Start finds the objects again and
// runs new pods at once, with IPs that no pod of the earlier run has.
func TestKeptDataDir(t *testing.T) {
	requireBinaries(t)
	dir := t.TempDir()
	cfg := Config{DataDir: dir}
	ctx := t.Context()

	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	if _, err := Start(ctx, cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Start on the same data directory: got %v, want an in-use error", err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: metav1.NamespaceDefault}}
	if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := podIP(t, cs, "before")
	if !c.PodCIDR().Contains(before) {
		t.Errorf("pod IP %s is not in PodCIDR() %s", before, c.PodCIDR())
	}
	ids := identify(t, c.PIDs())
	began := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("graceful stop took %s", time.Since(began).Round(time.Millisecond))
	if left := alive(ids); len(left) > 0 {
		t.Errorf("still running after Stop: %v", left)
	}

	began = time.Now()
	c2, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start again: %v", err)
	}
	t.Cleanup(func() { _ = c2.Stop() })
	t.Logf("restart with kept data ready after %s", time.Since(began).Round(10*time.Millisecond))
	cs2, err := kubernetes.NewForConfig(c2.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs2.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("object from the first run is gone: %v", err)
	}
	// kwok forgets the IPs it gave before the restart: in the same range it
	// would give the new pod the old one's IP. podIP waits 30 s, less than
	// the 40 s the last run's node Lease would hold the pod back.
	if again := podIP(t, cs2, "before"); again != before {
		t.Errorf("pod of the first run changed IP from %s to %s", before, again)
	}
	if after := podIP(t, cs2, "after"); after == before || !c2.PodCIDR().Contains(after) || c2.PodCIDR().Contains(before) {
		t.Errorf("after the restart a new pod got %s in %s, the pod of the first run has %s", after, c2.PodCIDR(), before)
	}
	if err := c2.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd")); err != nil {
		t.Errorf("kept data directory lost etcd's data: %v", err)
	}
}

// podIP creates a pod in the default namespace unless it exists and returns
// its IP once kwok has given it one.
func podIP(t *testing.T, cs kubernetes.Interface, name string) netip.Addr {
	t.Helper()
	pods := cs.CoreV1().Pods(metav1.NamespaceDefault)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{Name: "server", Image: "registry.invalid/model-server:1"}}},
	}
	if _, err := pods.Create(t.Context(), pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.PodIP != "" {
			ip, err := netip.ParseAddr(p.Status.PodIP)
			if err != nil {
				t.Fatalf("pod %s: %v", name, err)
			}
			return ip
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s has no IP after 30s: %+v", name, p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
