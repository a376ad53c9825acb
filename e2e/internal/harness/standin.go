package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
)

// StandIn plays the Deployment controller in one namespace: every
// generation it has not reported yet is reported after Delay, rolled out
// and available, or, for a pod template whose manifest hash is in Failing,
// as a rollout that exceeded its progress deadline while the old pods
// serve. It remembers when it reported each generation. With WithPodIPs
// the report waits for the new pods to be Ready, as the kubelet makes them.
type StandIn struct {
	// Delay is the longest wait before a report (uniform from 0); 0 reports
	// at once.
	Delay time.Duration

	c      client.WithWatch
	ns     string
	w      watch.Interface
	queues []chan *appsv1.Deployment
	wg     sync.WaitGroup

	// feeders are the watches that fill the queues (the Deployments',
	// and the pods' of WithPodIPs); the queues close once all ended.
	feeders sync.WaitGroup

	mu       sync.Mutex
	failing  map[string]bool
	crashing map[string]bool
	pods     bool
	reported map[string]map[int64]time.Time
	rnd      *rand.Rand
	// kubelet plays the kubelet's readiness (WithPodIPs); nil creates
	// the pods Ready.
	kubelet *kubelet
	// rolling holds, per Deployment, the generation the stand-in
	// reported observed but not yet rolled out: its new pods are not
	// all Ready (WithPodIPs).
	rolling map[string]int64
}

// deploymentLabel marks the stand-in's pods with their Deployment.
const deploymentLabel = "harness.openmed.ai/deployment"

// NewStandIn starts the stand-in for namespace ns with workers writers.
func NewStandIn(t *testing.T, c client.WithWatch, ns string, workers int, delay time.Duration) *StandIn {
	t.Helper()
	w, err := c.Watch(context.Background(), &appsv1.DeploymentList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	s := &StandIn{Delay: delay, c: c, ns: ns, w: w, failing: map[string]bool{}, crashing: map[string]bool{}, reported: map[string]map[int64]time.Time{},
		rnd: rand.New(rand.NewPCG(1, 2)), rolling: map[string]int64{}}
	for i := 0; i < workers; i++ {
		q := make(chan *appsv1.Deployment, 4096)
		s.queues = append(s.queues, q)
		s.wg.Add(1)
		go s.work(q)
	}
	s.feeders.Add(1)
	go func() {
		defer s.feeders.Done()
		for ev := range w.ResultChan() {
			if d, ok := ev.Object.(*appsv1.Deployment); ok && ev.Type != watch.Deleted && d.Generation > d.Status.ObservedGeneration {
				s.enqueue(d)
			}
		}
	}()
	go func() {
		s.feeders.Wait()
		for _, q := range s.queues {
			close(q)
		}
	}()
	return s
}

// enqueue hands d to its worker: one worker per Deployment, so its
// updates are made in order.
func (s *StandIn) enqueue(d *appsv1.Deployment) {
	s.queues[int(hash(d.Name))%len(s.queues)] <- d
}

// Fail makes every template with this manifest hash fail its rollout.
func (s *StandIn) Fail(manifestHash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[manifestHash] = true
}

// WithPods makes the stand-in play the ReplicaSet controller and the kubelet
// too: before it reports a rollout available it creates the replicas' pods
// of the new template (its labels and annotations), Running and Ready, and
// deletes the pods of the Deployment's other templates.
func (s *StandIn) WithPods() *StandIn {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = true
	return s
}

// Crash makes a container of a pod of every template with this manifest
// hash restart once, up to a second after the stand-in reported the
// rollout (needs WithPods).
func (s *StandIn) Crash(manifestHash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crashing[manifestHash] = true
}

func hash(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

func (s *StandIn) work(q chan *appsv1.Deployment) {
	defer s.wg.Done()
	for d := range q {
		if s.Delay > 0 {
			s.mu.Lock()
			wait := time.Duration(s.rnd.Int64N(int64(s.Delay)))
			s.mu.Unlock()
			time.Sleep(wait)
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			live := &appsv1.Deployment{}
			if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(d), live); err != nil {
				return client.IgnoreNotFound(err)
			}
			h := live.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
			s.mu.Lock()
			failing, pods, crash, kl, rolling := s.failing[h], s.pods, s.crashing[h], s.kubelet, s.rolling[live.Name] == live.Generation
			s.mu.Unlock()
			reported := live.Status.ObservedGeneration >= live.Generation && !rolling
			if pods && !failing && kl != nil {
				// As the kubelet and the Deployment controller: the
				// rollout is reported once every new pod is Ready, its
				// readiness gates included; until then, observed and
				// rolling. A reported rollout whose pod's gate turned
				// False is rolling again.
				done, status, err := s.rollPods(live, kl, rolling || reported)
				switch {
				case err != nil:
					return err
				case done && reported:
					return nil
				case !done:
					s.mu.Lock()
					s.rolling[live.Name] = live.Generation
					s.mu.Unlock()
					if counts(live.Status) == counts(status) {
						return nil
					}
					live.Status = status
					return s.c.Status().Update(context.Background(), live)
				}
			} else if reported {
				return nil
			}
			if pods && !failing && kl == nil {
				names, err := s.ensurePods(live)
				if err != nil {
					return err
				}
				if crash && len(names) > 0 {
					s.mu.Lock()
					wait := time.Duration(s.rnd.Int64N(int64(time.Second)))
					s.mu.Unlock()
					s.wg.Add(1)
					go s.crash(names[0], wait)
				}
			}
			live.Status = Status(live, failing)
			if err := s.c.Status().Update(context.Background(), live); err != nil {
				return err
			}
			s.mu.Lock()
			delete(s.rolling, live.Name)
			if s.reported[live.Name] == nil {
				s.reported[live.Name] = map[int64]time.Time{}
			}
			s.reported[live.Name][live.Generation] = time.Now()
			s.mu.Unlock()
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "stand-in:", err)
		}
	}
}

// ensurePods creates the pods of d's template that do not exist, Ready, and
// deletes the Deployment's pods of other templates; it returns the names of
// the template's pods.
func (s *StandIn) ensurePods(d *appsv1.Deployment) ([]string, error) {
	ctx := context.Background()
	h := d.Spec.Template.Annotations[v1alpha1.ManifestHashAnnotation]
	var pods corev1.PodList
	if err := s.c.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabels{deploymentLabel: d.Name}); err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[v1alpha1.ManifestHashAnnotation] == h {
			have[p.Name] = true
			continue
		}
		if err := s.c.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
	}
	short := shortHash(h)
	owner, err := s.ensureReplicaSet(d, short)
	if err != nil {
		return nil, err
	}
	var names []string
	for i := 0; i < int(ptr.Deref(d.Spec.Replicas, 1)); i++ {
		name := fmt.Sprintf("%s-%s-%d", d.Name, short, i)
		names = append(names, name)
		if have[name] {
			continue
		}
		pod := s.newPod(d, name, short, owner)
		if err := s.c.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		if err := s.setPodStatus(name, func(p *corev1.Pod) {
			now := metav1.Now()
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, Ready: true,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
		}); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// shortHash is the pod-template-hash the stand-in gives the template of
// manifest hash h.
func shortHash(h string) string {
	short := strings.TrimPrefix(h, "sha256:")
	short = short[:min(10, len(short))]
	if short == "" {
		// A template the operator has not pointed yet: one hash of its
		// own, so the ReplicaSet's name ends in a letter or digit.
		short = "unpointed"
	}
	return short
}

// newPod is the pod called name of d's template, as the template's ReplicaSet
// (owner, pod-template-hash short) names and labels it: the bake reads
// only the pods a ReplicaSet of the target controls.
func (s *StandIn) newPod(d *appsv1.Deployment, name, short string, owner metav1.OwnerReference) *corev1.Pod {
	labels := map[string]string{deploymentLabel: d.Name, appsv1.DefaultDeploymentUniqueLabelKey: short}
	for k, v := range d.Spec.Template.Labels {
		labels[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: labels, Annotations: d.Spec.Template.Annotations,
			OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: d.Spec.Template.Spec.Containers[0].Name, Image: d.Spec.Template.Spec.Containers[0].Image}}},
	}
}

// ensureReplicaSet creates, unless it exists, the ReplicaSet of d's
// template whose pod-template-hash is hash, as the Deployment controller
// does (named "<deployment>-<hash>", the template's labels and the hash,
// controlled by d), and returns the controller reference its pods carry:
// a pod counts for a model only through that chain of UIDs.
func (s *StandIn) ensureReplicaSet(d *appsv1.Deployment, hash string) (metav1.OwnerReference, error) {
	ctx := context.Background()
	labels := map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash}
	for k, v := range d.Spec.Template.Labels {
		labels[k] = v
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-" + hash, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(d, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: d.Spec.Template.Spec}},
	}
	err := s.c.Create(ctx, rs)
	if apierrors.IsAlreadyExists(err) {
		err = s.c.Get(ctx, client.ObjectKeyFromObject(rs), rs)
	}
	if err != nil {
		return metav1.OwnerReference{}, err
	}
	return *metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet")), nil
}

// crash reports, after wait, that the pod's container was OOM-killed and
// restarted.
func (s *StandIn) crash(name string, wait time.Duration) {
	defer s.wg.Done()
	time.Sleep(wait)
	err := s.setPodStatus(name, func(p *corev1.Pod) {
		if len(p.Status.ContainerStatuses) == 0 {
			return
		}
		now := metav1.Now()
		c := &p.Status.ContainerStatuses[0]
		c.RestartCount++
		c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled", StartedAt: c.State.Running.StartedAt, FinishedAt: now}
		c.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
	})
	if err != nil && !apierrors.IsNotFound(err) {
		fmt.Fprintln(os.Stderr, "stand-in crash:", err)
	}
}

func (s *StandIn) setPodStatus(name string, mutate func(*corev1.Pod)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p := &corev1.Pod{}
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, p); err != nil {
			return err
		}
		mutate(p)
		return s.c.Status().Update(context.Background(), p)
	})
}

// Status is what the Deployment controller reports for d's current
// generation: rolled out and available, or failed.
func Status(d *appsv1.Deployment, failing bool) appsv1.DeploymentStatus {
	r := ptr.Deref(d.Spec.Replicas, 1)
	now := metav1.Now()
	if failing {
		return appsv1.DeploymentStatus{
			ObservedGeneration: d.Generation, Replicas: r + 1, UpdatedReplicas: 1, ReadyReplicas: r, AvailableReplicas: r, UnavailableReplicas: 1,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", LastUpdateTime: now, LastTransitionTime: now},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", LastUpdateTime: now, LastTransitionTime: now},
			},
		}
	}
	return appsv1.DeploymentStatus{
		ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable", LastUpdateTime: now, LastTransitionTime: now},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable", LastUpdateTime: now, LastTransitionTime: now},
		},
	}
}

// Reported is how many Deployments have been reported at least once.
func (s *StandIn) Reported() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reported)
}

// LastReport is when the stand-in last reported a generation of name.
func (s *StandIn) LastReport(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last time.Time
	var gen int64
	for g, at := range s.reported[name] {
		if g > gen {
			gen, last = g, at
		}
	}
	return last
}

// Stop ends the stand-in and waits for its writers.
func (s *StandIn) Stop() {
	s.w.Stop()
	s.mu.Lock()
	kl := s.kubelet
	s.mu.Unlock()
	if kl != nil {
		kl.pods.Stop()
	}
	s.wg.Wait()
}

// SetAvailable reports the Deployment name's current generation available
// or not (its pods lost and back, no rollout) and returns when it wrote it.
func (s *StandIn) SetAvailable(t *testing.T, name string, available bool) time.Time {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := &appsv1.Deployment{}
		if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: name}, d); err != nil {
			return err
		}
		r := ptr.Deref(d.Spec.Replicas, 1)
		d.Status.AvailableReplicas, d.Status.ReadyReplicas, d.Status.UnavailableReplicas = r, r, 0
		d.Status.Conditions[0].Status = corev1.ConditionTrue
		if !available {
			d.Status.AvailableReplicas, d.Status.ReadyReplicas, d.Status.UnavailableReplicas = 0, 0, r
			d.Status.Conditions[0].Status = corev1.ConditionFalse
		}
		return s.c.Status().Update(context.Background(), d)
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Now()
}
