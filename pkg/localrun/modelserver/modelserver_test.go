package modelserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/localrun/modelserver"
	"github.com/openmed/openmed-operator/pkg/minicluster"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// behaviourAnnotation on a pod picks its Behaviour in TestFleet.
const behaviourAnnotation = "modelserver.openmed.ai/behaviour"

// text is what TestFleet asks the pods about: two names and a date.
const text = "Patient John Smith, born 1957-03-14, seen by Dr. Jane Doe."

// TestFleet serves the pods of the chart's Deployment (two replicas) and
// talks to them over HTTP on their IPs: a pod answers correctly, then, as
// its annotation changes, without the names, with 500 and not at all; each
// request is recorded; a pod is no longer served once its container stopped
// or it is gone, and its replacement is; Close ends a hanging request and
// leaves no listener and no goroutine.
func TestFleet(t *testing.T) {
	requireCluster(t)
	ctx := t.Context()
	cs, ns := newNamespace(t, "fleet-")
	selector := createTarget(t, ns, 2)

	baseline := fleetGoroutines()
	behaviours := map[string]modelserver.Behaviour{
		"":             modelserver.Correct,
		"omit-name":    modelserver.OmitName,
		"server-error": modelserver.ServerError,
		"hang":         modelserver.Hang,
	}
	fleet, closeFleet := startFleet(t, modelserver.Options{
		Namespace: ns,
		Selector:  selector,
		Behaviour: func(pod *corev1.Pod) modelserver.Behaviour { return behaviours[pod.Annotations[behaviourAnnotation]] },
	})

	// served waits until the Fleet serves n pods and returns them, each
	// checked against the pod's IP.
	served := func(t *testing.T, n int) map[string]netip.AddrPort {
		t.Helper()
		var serving map[string]netip.AddrPort
		testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d pods served", n), func() (bool, string) {
			if serving = fleet.Serving(); len(serving) == n {
				return true, ""
			}
			return false, fmt.Sprintf("%v; pods: %s", serving, podStates(t, cs, ns))
		})
		for name, addr := range serving {
			pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if addr.String() != net.JoinHostPort(pod.Status.PodIP, "8080") || !cluster.PodCIDR().Contains(addr.Addr()) {
				t.Errorf("pod %s (IP %s) served on %s, want its IP and port 8080 in %s", name, pod.Status.PodIP, addr, cluster.PodCIDR())
			}
		}
		return serving
	}
	serving := served(t, 2)
	pods := slices.Sorted(func(yield func(string) bool) {
		for name := range serving {
			if !yield(name) {
				return
			}
		}
	})
	a, b := pods[0], pods[1]
	everServed := []netip.AddrPort{serving[a], serving[b]}

	t.Run("a pod answers correctly and records what it received", func(t *testing.T) {
		got := extract(t, ctx, serving[a])
		if got.status != http.StatusOK || !reflect.DeepEqual(got.entities, modelserver.Entities(text)) {
			t.Fatalf("POST /pii/extract: %d %+v, want 200 %+v", got.status, got.entities, modelserver.Entities(text))
		}
		// The wire format of the OpenMed service, field by field.
		var raw map[string][]map[string]any
		if err := json.Unmarshal(got.body, &raw); err != nil || len(raw["entities"]) != 3 ||
			!reflect.DeepEqual(raw["entities"][0], map[string]any{"label": "NAME", "text": "John Smith", "start": 8.0, "end": 18.0, "score": 0.98}) {
			t.Errorf("answer %s", got.body)
		}
		if status, body := getReadyz(t, serving[a]); status != http.StatusOK || body != "ok" {
			t.Errorf("GET /readyz: %d %q", status, body)
		}
		reqs := fleet.Requests(a)
		if len(reqs) != 2 {
			t.Fatalf("pod %s recorded %d requests, want 2: %+v", a, len(reqs), reqs)
		}
		sent, probe := reqs[0], reqs[1]
		if sent.Pod != a || sent.Addr != serving[a] || sent.Method != http.MethodPost || sent.Path != "/pii/extract" ||
			sent.Header.Get("Authorization") != "Bearer s3cret" || sent.Host != serving[a].String() ||
			!bytes.Equal(sent.Body, requestBody(t)) || sent.Status != http.StatusOK || time.Since(sent.Time) > time.Minute {
			t.Errorf("recorded POST: %+v", sent)
		}
		if probe.Method != http.MethodGet || probe.Path != "/readyz" || probe.Status != http.StatusOK || probe.Time.Before(sent.Time) {
			t.Errorf("recorded GET /readyz: %+v", probe)
		}
		if n := len(fleet.Requests(b)); n != 0 {
			t.Errorf("pod %s recorded %d requests sent to %s", b, n, a)
		}

		// The date's score, 0.95, is below the threshold; the names', 0.98,
		// above.
		strict, err := json.Marshal(map[string]any{"text": text, "confidence_threshold": 0.97})
		if err != nil {
			t.Fatal(err)
		}
		got = post(ctx, serving[a], strict)
		if labels := entityLabels(got.entities); got.status != http.StatusOK || !slices.Equal(labels, []string{"NAME", "NAME"}) {
			t.Errorf("with confidence_threshold 0.97: %d %s", got.status, got.body)
		}
		if got := post(ctx, serving[a], []byte(`{"model_name":"x"}`)); got.status != http.StatusUnprocessableEntity {
			t.Errorf("without text: %d %s", got.status, got.body)
		}
	})

	t.Run("the behaviour follows the pod at each request", func(t *testing.T) {
		var withoutNames []modelserver.Entity
		for _, e := range modelserver.Entities(text) {
			if e.Label != modelserver.LabelName {
				withoutNames = append(withoutNames, e)
			}
		}
		annotate(t, cs, ns, a, "omit-name")
		waitAnswer(t, ctx, serving[a], "the answer without names", func(got answer) bool {
			return got.status == http.StatusOK && reflect.DeepEqual(got.entities, withoutNames)
		})
		annotate(t, cs, ns, a, "server-error")
		waitAnswer(t, ctx, serving[a], "a 500", func(got answer) bool { return got.status == http.StatusInternalServerError })
		// The other pod is untouched.
		if got := extract(t, ctx, serving[b]); got.status != http.StatusOK || !reflect.DeepEqual(got.entities, modelserver.Entities(text)) {
			t.Errorf("pod %s: %d %+v", b, got.status, got.entities)
		}

		annotate(t, cs, ns, a, "hang")
		waitAnswer(t, ctx, serving[a], "no answer within 500ms", func(got answer) bool {
			return errors.Is(got.err, context.DeadlineExceeded)
		})
		last := fleet.Requests(a)[len(fleet.Requests(a))-1]
		if last.Path != "/pii/extract" || last.Status != 0 {
			t.Errorf("recorded hanging request: %+v", last)
		}
	})

	t.Run("a pod is served while its container runs, its replacement as it comes", func(t *testing.T) {
		// An eviction leaves the pod with its IP and its containers
		// terminated; the ReplicaSet replaces it.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, minicluster.EvictAnnotation)
		if _, err := cs.CoreV1().Pods(ns).Patch(ctx, b, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "the evicted pod no longer served, its replacement served", func() (bool, string) {
			serving := fleet.Serving()
			_, evicted := serving[b]
			return !evicted && len(serving) == 2, fmt.Sprint(serving)
		})
		refused(t, everServed[1])
		serving := served(t, 2)
		for name, addr := range serving {
			if name != a {
				everServed = append(everServed, addr)
				if got := extract(t, ctx, addr); got.status != http.StatusOK {
					t.Errorf("replacement %s: %d %v", name, got.status, got.err)
				}
			}
		}

		if err := cs.CoreV1().Pods(ns).Delete(ctx, a, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "the deleted pod no longer served, its replacement served", func() (bool, string) {
			serving := fleet.Serving()
			_, deleted := serving[a]
			return !deleted && len(serving) == 2, fmt.Sprint(serving)
		})
		for name, addr := range served(t, 2) {
			everServed = append(everServed, addr)
			// kwok may give a deleted pod's IP to the next pod: then the
			// address answers again, for the new pod.
			if got := extract(t, ctx, addr); got.status != http.StatusOK {
				t.Errorf("pod %s: %d %v", name, got.status, got.err)
			}
		}
		if n := len(fleet.Requests(a)); n < 4 {
			t.Errorf("the deleted pod's requests are gone: %d left", n)
		}
	})

	t.Run("Close ends a hanging request and leaves nothing", func(t *testing.T) {
		serving := fleet.Serving()
		var hanging string
		for name := range serving {
			hanging = name
		}
		annotate(t, cs, ns, hanging, "hang")
		waitAnswer(t, ctx, serving[hanging], "no answer within 500ms", func(got answer) bool {
			return errors.Is(got.err, context.DeadlineExceeded)
		})
		// No deadline: only Close can end it.
		result := make(chan answer, 1)
		body := requestBody(t)
		go func() { result <- post(context.Background(), serving[hanging], body) }()
		testenv.Eventually(t, 10*time.Second, "the request to hang arrived", func() (bool, string) {
			reqs := fleet.Requests(hanging)
			return len(reqs) > 0 && reqs[len(reqs)-1].Status == 0 && time.Since(reqs[len(reqs)-1].Time) < 5*time.Second, ""
		})

		began := time.Now()
		if err := closeFleet(); err != nil {
			t.Errorf("Close: %v", err)
		}
		t.Logf("closed after %s", time.Since(began).Round(time.Millisecond))
		select {
		case got := <-result:
			if got.err == nil {
				t.Errorf("the hanging request got an answer: %d %s", got.status, got.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the hanging request still waits after Close")
		}
		for _, addr := range everServed {
			refused(t, addr)
		}
		// The last of them may still be returning.
		testenv.Eventually(t, 2*time.Second, "no goroutine of the Fleet left", func() (bool, string) {
			left := fleetGoroutines()
			return len(left) <= len(baseline), strings.Join(left, "\n\n")
		})
	})
}

// TestFleetRetriesATakenAddress: a pod whose address is taken when its
// container runs is not served; once the address is free the Fleet serves
// it at its next try, and Close reports nothing.
func TestFleetRetriesATakenAddress(t *testing.T) {
	requireCluster(t)
	ctx := t.Context()
	cs, ns := newNamespace(t, "taken-")
	// A listener on every address takes the port on each pod's IP too.
	taken, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := taken.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { _ = taken.Close() })

	selector := createTarget(t, ns, 1)
	testenv.Eventually(t, 30*time.Second, "the pod running", func() (bool, string) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
		if err != nil || len(pods.Items) != 1 {
			return false, fmt.Sprint(err)
		}
		p := pods.Items[0]
		running := p.Status.PodIP != "" && slices.ContainsFunc(p.Status.ContainerStatuses, func(s corev1.ContainerStatus) bool {
			return s.State.Running != nil
		})
		return running, fmt.Sprintf("%s ip=%q %v", p.Status.Phase, p.Status.PodIP, p.Status.ContainerStatuses)
	})
	fleet, closeFleet := startFleet(t, modelserver.Options{Namespace: ns, Selector: selector, Port: port})
	// Start returns once it has tried the pods that exist.
	if serving := fleet.Serving(); len(serving) != 0 {
		t.Fatalf("served on a taken port: %v", serving)
	}

	if err := taken.Close(); err != nil {
		t.Fatal(err)
	}
	var addr netip.AddrPort
	testenv.Eventually(t, 30*time.Second, "the pod served once its address is free", func() (bool, string) {
		serving := fleet.Serving()
		for _, a := range serving {
			addr = a
		}
		if len(serving) == 1 {
			return true, ""
		}
		return false, fmt.Sprintf("%v; pods: %s", serving, podStates(t, cs, ns))
	})
	if got := extract(t, ctx, addr); got.status != http.StatusOK || !reflect.DeepEqual(got.entities, modelserver.Entities(text)) {
		t.Errorf("POST /pii/extract on %s: %d %+v %v", addr, got.status, got.entities, got.err)
	}
	if err := closeFleet(); err != nil {
		t.Errorf("Close after the pod was served: %v", err)
	}
}

// startFleet starts a Fleet with opts on the test cluster. closeFleet
// closes it and returns Close's error; if the test has not called it by its
// end, the cleanup does and fails the test on an error.
func startFleet(t *testing.T, opts modelserver.Options) (fleet *modelserver.Fleet, closeFleet func() error) {
	t.Helper()
	fleet, err := modelserver.Start(t.Context(), cluster.RESTConfig(), opts)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	closeFleet = func() error {
		closed = true
		return fleet.Close()
	}
	t.Cleanup(func() {
		if !closed {
			if err := closeFleet(); err != nil {
				t.Error(err)
			}
		}
	})
	return fleet, closeFleet
}

// newNamespace creates a namespace named from prefix and returns it with a
// clientset of the cluster.
func newNamespace(t *testing.T, prefix string) (kubernetes.Interface, string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	created, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cs, created.Name
}

// podStates describes the pods of ns for a failure message: name, phase,
// IP and whether each container runs.
func podStates(t *testing.T, cs kubernetes.Interface, ns string) string {
	t.Helper()
	pods, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range pods.Items {
		running := []string{}
		for _, c := range p.Status.ContainerStatuses {
			running = append(running, fmt.Sprintf("%s running=%t", c.Name, c.State.Running != nil))
		}
		out = append(out, fmt.Sprintf("%s %s ip=%q deleting=%t %v", p.Name, p.Status.Phase, p.Status.PodIP, p.DeletionTimestamp != nil, running))
	}
	return strings.Join(out, "; ")
}

// createTarget creates examples/target-deployment.yaml (the Helm chart's
// ConfigMap and Deployment) in ns with the replicas given, and returns the
// selector of its pods.
func createTarget(t *testing.T, ns string, replicas int64) labels.Selector {
	t.Helper()
	c, err := client.New(cluster.RESTConfig(), client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := localrun.ReadObjects(filepath.Join(localrun.ExamplesDir(), localrun.TargetExample))
	if err != nil {
		t.Fatal(err)
	}
	var selector labels.Selector
	for _, u := range objs {
		u.SetNamespace(ns)
		if u.GetKind() == "Deployment" {
			if err := unstructured.SetNestedField(u.Object, replicas, "spec", "replicas"); err != nil {
				t.Fatal(err)
			}
			match, _, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
			if err != nil {
				t.Fatal(err)
			}
			selector = labels.SelectorFromSet(match)
		}
		if err := c.Create(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	return selector
}

// annotate sets the pod's behaviourAnnotation.
func annotate(t *testing.T, cs kubernetes.Interface, ns, pod, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, behaviourAnnotation, value)
	if _, err := cs.CoreV1().Pods(ns).Patch(t.Context(), pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// answer is what a pod answered to POST /pii/extract.
type answer struct {
	status   int
	body     []byte
	entities []modelserver.Entity
	err      error
}

// requestBody is what extract sends.
func requestBody(t *testing.T) []byte {
	t.Helper()
	body, err := json.Marshal(map[string]any{"text": text, "model_name": "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1", "confidence_threshold": 0.5})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// httpClient opens a connection per request, so none outlives the test.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// extract sends text to the server on addr, with a bearer token.
func extract(t *testing.T, ctx context.Context, addr netip.AddrPort) answer {
	t.Helper()
	return post(ctx, addr, requestBody(t))
}

// post sends body to POST /pii/extract on addr, with a bearer token.
func post(ctx context.Context, addr netip.AddrPort, body []byte) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr.String()+"/pii/extract", bytes.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := httpClient.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	got := answer{status: resp.StatusCode}
	if got.body, got.err = io.ReadAll(resp.Body); got.err == nil && got.status == http.StatusOK {
		var out struct{ Entities []modelserver.Entity }
		got.err = json.Unmarshal(got.body, &out)
		got.entities = out.Entities
	}
	return got
}

// entityLabels lists the labels of entities in order.
func entityLabels(entities []modelserver.Entity) []string {
	var labels []string
	for _, e := range entities {
		labels = append(labels, e.Label)
	}
	return labels
}

// waitAnswer asks the server on addr, each time with a 500 ms deadline,
// until its answer is what is wanted: an annotation reaches the Fleet
// through its watch.
func waitAnswer(t *testing.T, ctx context.Context, addr netip.AddrPort, what string, want func(answer) bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		got := extract(t, ctx, addr)
		return want(got), fmt.Sprintf("%d %s %v", got.status, got.body, got.err)
	})
}

func getReadyz(t *testing.T, addr netip.AddrPort) (int, string) {
	t.Helper()
	resp, err := httpClient.Get("http://" + addr.String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// refused checks that nothing listens on addr.
func refused(t *testing.T, addr netip.AddrPort) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr.String(), 2*time.Second)
	if err == nil {
		_ = conn.Close()
		t.Errorf("%s still accepts connections", addr)
	}
}

// fleetGoroutines returns the stacks of the goroutines of a Fleet: its
// watch, its servers, their connections and handlers.
func fleetGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, mark := range []string{
			"openmed-operator/pkg/localrun/modelserver.",
			"net/http.(*Server).Serve",
			"net/http.(*conn).serve",
			"k8s.io/client-go/tools/cache.(*Reflector)",
			"k8s.io/client-go/tools/cache.(*controller)",
		} {
			if strings.Contains(g, mark) {
				found = append(found, g)
				break
			}
		}
	}
	return found
}
