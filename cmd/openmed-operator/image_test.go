package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/localrun"
)

// The release the test builds: any registry, since nothing pulls it.
const (
	releaseVersion = "v0.0.0-test.1"
	releaseCommit  = "0123456789abcdef0123456789abcdef01234567"
	releaseImage   = "registry.example.com/openmed/openmed-operator"
)

// TestReleasedImage builds the release as `make image release` does (the
// OCI layout and install.yaml, by `go run ./hack/release`), takes the
// binary out of the image for this machine's platform, and runs it exactly
// as install.yaml's Deployment would: the image's entrypoint with the
// container's args, only the container's environment (its fieldRef and
// resourceFieldRef resolved as the kubelet does), as the image's user, with
// a token of the bundle's ServiceAccount under the bundle's RBAC, against
// the real API server. A model rolls out and is deleted, the health
// endpoints answer on the ports the manifest names, the metrics endpoint
// serves the model and the build's version, and SIGTERM ends it cleanly.
func TestReleasedImage(t *testing.T) {
	ctx := context.Background()
	dist := t.TempDir()
	for _, step := range []string{"image", "manifests"} {
		cmd := exec.Command("go", "run", "./hack/release", step, "--out", dist, "--version", releaseVersion,
			"--commit", releaseCommit, "--image", releaseImage, "--source-date-epoch", "1700000000")
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+runtime.Version())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release %s: %v\n%s", step, err, out)
		}
	}
	digest, err := os.ReadFile(filepath.Join(dist, "image.digest"))
	if err != nil {
		t.Fatal(err)
	}

	objs, err := localrun.ReadObjects(filepath.Join(dist, "install.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() == "Deployment" {
			if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &dep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("install.yaml's Deployment has %d containers, want 1", len(dep.Spec.Template.Spec.Containers))
	}
	container := dep.Spec.Template.Spec.Containers[0]
	if want := releaseImage + "@" + strings.TrimSpace(string(digest)); container.Image != want {
		t.Fatalf("install.yaml runs %q, want the image by digest %q", container.Image, want)
	}

	// The image for this machine, from the layout.
	root := t.TempDir()
	entrypoint, user := extractImage(t, filepath.Join(dist, "oci"), strings.TrimSpace(string(digest)), root)
	sc := dep.Spec.Template.Spec.SecurityContext
	if want := fmt.Sprintf("%d:%d", *sc.RunAsUser, *sc.RunAsGroup); user != want {
		t.Errorf("the image runs as %q, the pod as runAsUser:runAsGroup %q", user, want)
	}
	argv := append(append([]string{}, container.Command...), container.Args...)
	if len(container.Command) == 0 {
		argv = append(append([]string{}, entrypoint...), container.Args...)
	}

	// The bundle, with the ServiceAccount and RBAC the pod would run as.
	if _, err := kustomize.Apply(ctx, env.Client, objs); err != nil {
		t.Fatal(err)
	}
	namespace := dep.Namespace
	token, err := localrun.ServiceAccountToken(ctx, env.Client, namespace, dep.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}

	// Run as the image's user: the files it reads are its own.
	runDir, err := os.MkdirTemp("", "openmed-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	uidS, gidS, _ := strings.Cut(user, ":")
	uid, errU := strconv.Atoi(uidS)
	gid, errG := strconv.Atoi(gidS)
	if errU != nil || errG != nil {
		t.Fatalf("the image's user %q is not uid:gid", user)
	}
	asUser := os.Geteuid() == 0
	if !asUser {
		t.Logf("not root: the binary runs as uid %d, not the image's %s", os.Geteuid(), user)
	}
	exe := filepath.Join(runDir, filepath.Base(argv[0]))
	if err := os.Rename(filepath.Join(root, argv[0]), exe); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(runDir, "kubeconfig")
	if err := clientcmd.WriteToFile(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"in-cluster": {Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"sa": {Token: token}},
		Contexts:       map[string]*clientcmdapi.Context{"in-cluster": {Cluster: "in-cluster", AuthInfo: "sa"}},
		CurrentContext: "in-cluster",
	}, kc); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{runDir, exe, kc} {
		if asUser {
			if err := os.Chown(f, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}

	p := &operatorProcess{name: "image " + releaseVersion}
	p.cmd = exec.Command(exe, argv[1:]...)
	p.cmd.Dir = runDir
	// What the container runtime sets (PATH, HOSTNAME, and HOME from the
	// image's /etc/passwd), the container's environment, and nothing else;
	// KUBECONFIG stands in for the token the kubelet mounts (the binary
	// reads either).
	p.cmd.Env = append(runtimeEnv(t, root, uid, dep.Name+"-0"), containerEnv(t, container, namespace)...)
	p.cmd.Env = append(p.cmd.Env, "KUBECONFIG="+kc)
	if asUser {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	p.metricsAddr = portAddr(t, container, argv, "https-metrics", "--metrics-addr=")
	p.healthAddr = portAddr(t, container, argv, "healthz", "--health-addr=")
	p.start(t)
	if asUser {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("\nUid:\t%d\t%d\t", uid, uid); !strings.Contains(string(status), want) {
			t.Errorf("the process does not run as the image's user %d:\n%s", uid, status)
		}
	}
	for _, probe := range []*corev1.Probe{container.LivenessProbe, container.ReadinessProbe} {
		resp, err := http.Get("http://" + p.healthAddr + probe.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %s", probe.HTTPGet.Path, resp.Status)
		}
	}

	target := newNamespace(t, "image")
	rollOut(t, target, "svc")
	eventually(t, "the model's info metric", func() (bool, string) {
		v, ok := sum(p.scrape(t), "openmed_model_info", `name="svc"`, `namespace="`+target+`"`, `phase="Ready"`)
		return ok && v > 0, fmt.Sprintf("openmed_model_info = %v (found %v)", v, ok)
	})
	if v, ok := sum(p.scrape(t), "openmed_build_info", `version="`+releaseVersion+`"`, `commit="`+releaseCommit+`"`); !ok || v != 1 {
		t.Errorf("openmed_build_info{version=%q,commit=%q} = %v (found %v), want 1: the image does not report the release it is", releaseVersion, releaseCommit, v, ok)
	}
	deleteModel(t, target, "svc")
	if hasPointer(t, target, "svc") {
		t.Error("deletion did not release the model pointer")
	}
	p.terminate(t)
}

// extractImage finds the image for this machine's platform in the OCI
// layout's index of the given digest, writes its flattened filesystem's
// regular files under root and returns its entrypoint and user.
func extractImage(t *testing.T, layoutDir, digest, root string) (entrypoint []string, user string) {
	t.Helper()
	lp, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, d := range m.Manifests {
		found = found || d.Digest.String() == digest
	}
	if !found {
		t.Fatalf("the OCI layout holds no index %s", digest)
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := top.ImageIndex(h)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.OS+"/"+d.Platform.Architecture)
		if d.Platform.OS != "linux" || d.Platform.Architecture != runtime.GOARCH {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		rc := mutate.Extract(img)
		defer rc.Close()
		if err := localrun.Untar(rc, root); err != nil {
			t.Fatal(err)
		}
		return cf.Config.Entrypoint, cf.Config.User
	}
	t.Fatalf("the image has no linux/%s manifest (it has %v)", runtime.GOARCH, platforms)
	return nil, ""
}

// runtimeEnv is the environment containerd and CRI-O give every container
// of an image with no Env of its own: their default PATH, the pod's
// hostname, and HOME from the image's /etc/passwd entry for uid.
func runtimeEnv(t *testing.T, root string, uid int, hostname string) []string {
	t.Helper()
	passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		t.Fatalf("the image has no /etc/passwd: %v", err)
	}
	for _, line := range strings.Split(string(passwd), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[2] == strconv.Itoa(uid) {
			return []string{
				"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
				"HOSTNAME=" + hostname,
				"HOME=" + f[5],
			}
		}
	}
	t.Fatalf("the image's /etc/passwd has no user %d:\n%s", uid, passwd)
	return nil
}

// containerEnv resolves the container's environment as the kubelet would
// for a pod in namespace; a source it does not know fails the test, so a
// new variable in the manifest is never silently left out.
func containerEnv(t *testing.T, c corev1.Container, namespace string) []string {
	t.Helper()
	var env []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+namespace)
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			q := c.Resources.Limits[corev1.ResourceMemory]
			env = append(env, fmt.Sprintf("%s=%d", e.Name, q.Value()))
		default:
			t.Fatalf("the container sets %s from a source this test does not resolve: %+v", e.Name, e.ValueFrom)
		}
	}
	if len(c.EnvFrom) > 0 {
		t.Fatalf("the container has envFrom, which this test does not resolve")
	}
	return env
}

// portAddr is the loopback address the process listens on for the named
// container port: the flag in argv must name that port.
func portAddr(t *testing.T, c corev1.Container, argv []string, portName, flag string) string {
	t.Helper()
	var port int32
	for _, p := range c.Ports {
		if p.Name == portName {
			port = p.ContainerPort
		}
	}
	if port == 0 {
		t.Fatalf("the container has no port %q", portName)
	}
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, flag); ok {
			_, p, err := net.SplitHostPort(v)
			if err != nil {
				t.Fatal(err)
			}
			if p != strconv.Itoa(int(port)) {
				t.Fatalf("%s%s, but the container's port %s is %d", flag, v, portName, port)
			}
			return net.JoinHostPort("127.0.0.1", p)
		}
	}
	t.Fatalf("the container's args have no %s", flag)
	return ""
}
