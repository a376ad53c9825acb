package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// kubelet is what WithPodIPs adds to the stand-in: pod IPs, readiness
// probes and readiness gates, as the kubelet has them.
type kubelet struct {
	prefix netip.Prefix
	// next is the next pod IP to hand out (under StandIn.mu).
	next netip.Addr
	// pods is the watch of the namespace's pods, by which the stand-in
	// learns that a gate's condition changed.
	pods  watch.Interface
	probe *http.Client
}

// probeTimeout bounds how long the stand-in probes a new pod's container
// before it gives up on the pod (it answers within milliseconds of its
// server starting).
const probeTimeout = 30 * time.Second

// WithPodIPs makes the pods' readiness what the kubelet makes it, and the
// rollout's report wait for it (needs WithPods): each pod gets an IP of
// prefix (a loopback range, so that a test can serve the pods on their
// IPs), its containers turn ready only once the container's readiness
// probe (httpGet) answers on that IP, and the pod turns Ready only once
// the conditions of its readiness gates are True too, whoever sets them
// (the stand-in watches the pods). A rollout is reported complete once
// every new pod is Ready; until then the Deployment controller's status
// says the generation is observed and rolling, and the old templates'
// pods stay. Crash is not played in this mode.
func (s *StandIn) WithPodIPs(t *testing.T, prefix netip.Prefix) *StandIn {
	t.Helper()
	w, err := s.c.Watch(context.Background(), &corev1.PodList{}, client.InNamespace(s.ns))
	if err != nil {
		t.Fatal(err)
	}
	kl := &kubelet{prefix: prefix, next: prefix.Masked().Addr().Next(), pods: w,
		probe: &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}}
	s.mu.Lock()
	s.kubelet = kl
	s.mu.Unlock()
	s.feeders.Add(1)
	go func() {
		defer s.feeders.Done()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			// A gate's condition changed what Ready must be: the
			// Deployment's worker updates the pod and the report.
			if d := p.Labels[deploymentLabel]; d != "" && len(p.Spec.ReadinessGates) > 0 && isTrue(p, corev1.ContainersReady) && isTrue(p, corev1.PodReady) != gatesPass(p) {
				s.enqueue(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: d}})
			}
		}
	}()
	return s
}

// podIP hands out the next pod IP.
func (s *StandIn) podIP(kl *kubelet) (netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ip := kl.next
	if !kl.prefix.Contains(ip) {
		return netip.Addr{}, fmt.Errorf("pod range %s is used up", kl.prefix)
	}
	kl.next = ip.Next()
	return ip, nil
}

// rollPods plays the Deployment and ReplicaSet controllers and the kubelet
// for d's template (WithPodIPs). For a generation not observed yet
// (rolling false) it first reports it observed and rolling, as the
// Deployment controller does once it scaled the template's ReplicaSet,
// before any pod starts. Then it creates the replicas' pods that do not
// exist, with the template's readiness gates, probe and ports, gives each
// one started an IP, its containers ready once the probe answers, and the
// pod Ready once its gates pass too. Once every new pod is Ready it
// deletes the Deployment's pods of other templates and reports the rollout
// done; until then it returns the status the Deployment controller
// reports. d holds the status last written.
func (s *StandIn) rollPods(d *appsv1.Deployment, kl *kubelet, rolling bool) (bool, appsv1.DeploymentStatus, error) {
	ctx := context.Background()
	h := d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{deploymentLabel: d.Name}); err != nil {
		return false, appsv1.DeploymentStatus{}, err
	}
	have := map[string]*corev1.Pod{}
	var old []*corev1.Pod
	var oldReady int32
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case p.Annotations[v1alpha1.ManifestHashAnnotation] == h:
			have[p.Name] = p
		case p.DeletionTimestamp == nil:
			old = append(old, p)
			if isTrue(p, corev1.PodReady) {
				oldReady++
			}
		}
	}
	short := shortHash(h)
	owner, err := s.ensureReplicaSet(d, short)
	if err != nil {
		return false, appsv1.DeploymentStatus{}, err
	}
	if !rolling {
		d.Status = rollingStatus(d, 0, int32(len(old)), oldReady)
		if err := s.c.Status().Update(ctx, d); err != nil {
			return false, appsv1.DeploymentStatus{}, err
		}
		s.mu.Lock()
		s.rolling[d.Name] = d.Generation
		s.mu.Unlock()
	}
	container := d.Spec.Template.Spec.Containers[0]
	var ready int32
	for i := 0; i < int(ptr.Deref(d.Spec.Replicas, 1)); i++ {
		name := fmt.Sprintf("%s-%s-%d", d.Name, short, i)
		p := have[name]
		if p == nil {
			p = s.newPod(d, name, short, owner)
			p.Spec.ReadinessGates = d.Spec.Template.Spec.ReadinessGates
			p.Spec.Containers[0].Ports, p.Spec.Containers[0].ReadinessProbe = container.Ports, container.ReadinessProbe
			if err := s.c.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
				return false, appsv1.DeploymentStatus{}, err
			}
		}
		isReady, err := s.kubeletSync(kl, name)
		if err != nil {
			return false, appsv1.DeploymentStatus{}, err
		}
		if isReady {
			ready++
		}
	}
	replicas := ptr.Deref(d.Spec.Replicas, 1)
	if ready < replicas {
		return false, rollingStatus(d, ready, int32(len(old)), oldReady), nil
	}
	for _, p := range old {
		if err := s.c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return false, appsv1.DeploymentStatus{}, err
		}
	}
	return true, appsv1.DeploymentStatus{}, nil
}

// kubeletSync takes the pod name one step further as the kubelet would and
// reports whether it is Ready: started with an IP (its containers not
// ready), then its containers ready once the readiness probe answers, then
// Ready once its gates pass.
func (s *StandIn) kubeletSync(kl *kubelet, name string) (bool, error) {
	p := &corev1.Pod{}
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, p); err != nil {
		return false, err
	}
	if p.Status.PodIP == "" {
		ip, err := s.podIP(kl)
		if err != nil {
			return false, err
		}
		if err := s.setPodStatus(name, func(p *corev1.Pod) {
			now := metav1.Now()
			c := p.Spec.Containers[0]
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP, p.Status.PodIPs = ip.String(), []corev1.PodIP{{IP: ip.String()}}
			p.Status.StartTime = &now
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, Started: ptr.To(true),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
			setCondition(p, corev1.PodScheduled, corev1.ConditionTrue, "")
			setCondition(p, corev1.PodInitialized, corev1.ConditionTrue, "")
			setCondition(p, corev1.ContainersReady, corev1.ConditionFalse, "ContainersNotReady")
			setCondition(p, corev1.PodReady, corev1.ConditionFalse, "ContainersNotReady")
		}); err != nil {
			return false, err
		}
		p.Status.PodIP = ip.String()
	}
	if !isTrue(p, corev1.ContainersReady) {
		if err := kl.probeReady(p); err != nil {
			return false, err
		}
	}
	if isTrue(p, corev1.ContainersReady) && isTrue(p, corev1.PodReady) == gatesPass(p) {
		return isTrue(p, corev1.PodReady), nil
	}
	var ready bool
	err := s.setPodStatus(name, func(p *corev1.Pod) {
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = true
		}
		setCondition(p, corev1.ContainersReady, corev1.ConditionTrue, "")
		ready = gatesPass(p)
		if ready {
			setCondition(p, corev1.PodReady, corev1.ConditionTrue, "")
		} else {
			setCondition(p, corev1.PodReady, corev1.ConditionFalse, "ReadinessGatesNotReady")
		}
	})
	return ready, err
}

// probeReady runs the readiness probe of the pod's container on its IP
// until it passes (a status from 200 to 399, as the kubelet's httpGet
// probe), for up to probeTimeout. A container without an httpGet probe is
// ready once started.
func (kl *kubelet) probeReady(p *corev1.Pod) error {
	c := p.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		return nil
	}
	get := c.ReadinessProbe.HTTPGet
	port := get.Port.IntValue()
	for _, cp := range c.Ports {
		if get.Port.StrVal != "" && cp.Name == get.Port.StrVal {
			port = int(cp.ContainerPort)
		}
	}
	url := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)) + get.Path
	deadline := time.Now().Add(probeTimeout)
	for {
		resp, err := kl.probe.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode < 400 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s: readiness probe %s failed for %s: %v", p.Name, url, probeTimeout, err)
		}
		// The container's server starts a few milliseconds after the
		// pod shows it running.
		time.Sleep(20 * time.Millisecond)
	}
}

// rollingStatus is what the Deployment controller reports for d's current
// generation while its new pods turn Ready: ready of them are, and old of
// other templates still run, oldReady of them Ready. It is available as
// the default strategy counts it (at most a quarter of the replicas,
// rounded down, unavailable).
func rollingStatus(d *appsv1.Deployment, ready, old, oldReady int32) appsv1.DeploymentStatus {
	r := ptr.Deref(d.Spec.Replicas, 1)
	now := metav1.Now()
	available := ready + oldReady
	avail := appsv1.DeploymentCondition{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", LastUpdateTime: now, LastTransitionTime: now}
	if available < r-r/4 {
		avail.Status, avail.Reason = corev1.ConditionFalse, "MinimumReplicasUnavailable"
	}
	return appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: r + old, UpdatedReplicas: r, ReadyReplicas: available, AvailableReplicas: available,
		UnavailableReplicas: max(0, r+old-available),
		Conditions: []appsv1.DeploymentCondition{avail,
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated", LastUpdateTime: now, LastTransitionTime: now}},
	}
}

// statusCounts is a Deployment status without its times: a rolling status
// is written again only when one of these changed.
type statusCounts struct {
	generation                                   int64
	replicas, updated, ready, available, unavail int32
	conditions                                   string
}

func counts(st appsv1.DeploymentStatus) statusCounts {
	c := statusCounts{generation: st.ObservedGeneration, replicas: st.Replicas, updated: st.UpdatedReplicas, ready: st.ReadyReplicas,
		available: st.AvailableReplicas, unavail: st.UnavailableReplicas}
	for _, cond := range st.Conditions {
		c.conditions += fmt.Sprintf("%s=%s/%s;", cond.Type, cond.Status, cond.Reason)
	}
	return c
}

// isTrue reports whether the pod's condition typ is True.
func isTrue(p *corev1.Pod, typ corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gatesPass reports whether the condition of every readiness gate of the
// pod is True: with its containers ready, the kubelet's Ready.
func gatesPass(p *corev1.Pod) bool {
	for _, g := range p.Spec.ReadinessGates {
		if !isTrue(p, g.ConditionType) {
			return false
		}
	}
	return true
}

// setCondition sets the pod's condition typ, keeping its transition time
// when its status does not change.
func setCondition(p *corev1.Pod, typ corev1.PodConditionType, status corev1.ConditionStatus, reason string) {
	now := metav1.Now()
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type != typ {
			continue
		}
		if c.Status != status {
			c.LastTransitionTime = now
		}
		c.Status, c.Reason = status, reason
		return
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: status, Reason: reason, LastTransitionTime: now})
}
