// Package harness is what the scale benchmark and the fault suite share: a
// real kube-apiserver and etcd with an audit log of the operator's own
// requests, a stand-in for the Deployment controller, and readings of the
// operator process (CPU, memory).
package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmed/openmed-operator/kustomize"
	"github.com/openmed/openmed-operator/pkg/localrun"
	"github.com/openmed/openmed-operator/pkg/testenv"
)

// OperatorUser is the user the operator process authenticates as; the audit
// log records its requests only.
const OperatorUser = "openmed-operator"

// LockdownUser is the user the operator process authenticates as in a
// cluster of StartLockdown: the ServiceAccount of the install bundle, with
// no rights but the lockdown overlay's.
const LockdownUser = "system:serviceaccount:openmed-system:openmed-operator"

// Cluster is a kube-apiserver and etcd with the CRDs installed and an audit
// log of the operator's requests.
type Cluster struct {
	// User is the user the operator authenticates as (OperatorUser, or
	// LockdownUser); the audit log records its requests only.
	User string
	// OperatorArgs are flags the operator must run with in this cluster
	// (the lockdown overlay's --default-service-account).
	OperatorArgs []string
	Env          *testenv.Environment
	// Client is an administrator's client, outside the audit log.
	Client client.WithWatch
	// AuditLog is the audit log file.
	AuditLog string
	// Kubeconfig authenticates as OperatorUser (system:masters).
	Kubeconfig string
	// KubeconfigData is the same, in memory.
	KubeconfigData []byte

	// users are the users whose requests the audit log records: User and
	// the shard users (ShardKubeconfig).
	users []string
}

// maxShards is how many operator processes besides the first a cluster can
// tell apart in its audit log (ShardKubeconfig).
const maxShards = 8

// ShardUser is the user the i-th further operator process (a shard)
// authenticates as.
func ShardUser(user string, i int) string { return fmt.Sprintf("%s-shard-%d", user, i) }

// ShardKubeconfig writes a kubeconfig for the i-th further operator process
// (1 ≤ i ≤ 8), authenticated as ShardUser with the same rights as User, so
// the audit log tells its requests from the others'. Not in the lockdown.
func (c *Cluster) ShardKubeconfig(t *testing.T, i int) string {
	t.Helper()
	if i < 1 || i > maxShards || c.Lockdown() {
		t.Fatalf("shard %d: want 1..%d, and not in the lockdown", i, maxShards)
	}
	data, err := c.Env.AddUser(ShardUser(c.User, i), "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	path := strings.TrimSuffix(c.Kubeconfig, ".kubeconfig") + fmt.Sprintf("-shard-%d.kubeconfig", i)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Start starts the cluster in dir; level is the audit level of the
// operator's requests ("Metadata" or "RequestResponse"). Stop it with
// Cluster.Stop.
func Start(t *testing.T, dir, level string) *Cluster {
	t.Helper()
	return start(t, dir, level, OperatorUser, "system:masters")
}

// StartLockdown is Start for an operator installed by the lockdown overlay
// (kustomize/lockdown): the bundle is applied, the operator authenticates
// as the bundle's ServiceAccount (LockdownUser) and holds exactly the
// overlay's rights, so every write it makes to a Deployment or a ConfigMap
// must be made as a ServiceAccount of the object's namespace. Run the
// operator with OperatorArgs.
func StartLockdown(t *testing.T, dir, level string) *Cluster {
	t.Helper()
	c := start(t, dir, level, LockdownUser, "system:serviceaccounts", "system:serviceaccounts:openmed-system")
	objs, err := kustomize.Build(filepath.Join(kustomize.Dir(), kustomize.LockdownOverlay))
	if err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	if _, err := kustomize.Apply(context.Background(), c.Client, objs); err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, a := range args {
			if strings.HasPrefix(a, "--default-service-account") {
				c.OperatorArgs = append(c.OperatorArgs, a)
			}
		}
	}
	if len(c.OperatorArgs) == 0 {
		c.Stop(t)
		t.Fatal("the lockdown overlay's operator has no --default-service-account")
	}
	return c
}

// LockdownEnv, set to anything, makes the scale benchmark and the fault
// suite run the operator as the lockdown overlay installs it (StartFor).
const LockdownEnv = "OPENMED_LOCKDOWN"

// StartFor is StartLockdown when $OPENMED_LOCKDOWN is set, else Start.
func StartFor(t *testing.T, dir, level string) *Cluster {
	t.Helper()
	if os.Getenv(LockdownEnv) != "" {
		return StartLockdown(t, dir, level)
	}
	return Start(t, dir, level)
}

// Lockdown reports whether the operator runs with the lockdown overlay's
// rights.
func (c *Cluster) Lockdown() bool { return c.User == LockdownUser }

// LeaseNamespace is where the operator may hold its Lease: the bundle's
// namespace in the lockdown (its Role is there), else "default".
func (c *Cluster) LeaseNamespace() string {
	if c.Lockdown() {
		return "openmed-system"
	}
	return "default"
}

// TenantServiceAccount is the ServiceAccount of examples/tenancy.
const TenantServiceAccount = "openmed-deployer"

// Tenant makes ns a tenant namespace in a lockdown cluster: it creates the
// objects of examples/tenancy/tenant-role.yaml and
// examples/tenancy/impersonator-binding.yaml there (the namespace replaced,
// nothing else) and returns the ServiceAccount the models of ns name.
// Outside the lockdown it does nothing and returns "".
func (c *Cluster) Tenant(t *testing.T, ns string) string {
	t.Helper()
	if !c.Lockdown() {
		return ""
	}
	ApplyTenantRole(t, c.Client, ns)
	ApplyImpersonatorBinding(t, c.Client, ns)
	return TenantServiceAccount
}

// ApplyTenantRole creates examples/tenancy/tenant-role.yaml in ns, the
// namespace replaced (localrun.TenantRole).
func ApplyTenantRole(t *testing.T, c client.Client, ns string) {
	t.Helper()
	objs, err := localrun.TenantRole(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// ApplyImpersonatorBinding creates examples/tenancy/impersonator-binding.yaml
// in ns, the namespace replaced (localrun.ImpersonatorBinding): the operator
// may then impersonate the ServiceAccounts of ns.
func ApplyImpersonatorBinding(t *testing.T, c client.Client, ns string) {
	t.Helper()
	objs, err := localrun.ImpersonatorBinding(ns)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func start(t *testing.T, dir, level, user string, groups ...string) *Cluster {
	t.Helper()
	c := &Cluster{User: user, AuditLog: filepath.Join(dir, "audit.log"), Kubeconfig: filepath.Join(dir, "operator.kubeconfig")}
	policy := filepath.Join(dir, "audit-policy.yaml")
	users := []string{user}
	for i := 1; i <= maxShards; i++ {
		users = append(users, ShardUser(user, i))
	}
	c.users = users
	body := "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n" +
		"- level: " + level + "\n  users: [\"" + strings.Join(users, `", "`) + "\"]\n- level: None\n"
	if err := os.WriteFile(policy, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	env, err := testenv.StartWith(testenv.Options{APIServerFlags: map[string]string{
		"audit-log-path": c.AuditLog, "audit-policy-file": policy, "audit-log-maxsize": "0",
	}})
	if err != nil {
		t.Fatal(err)
	}
	c.Env = env
	if c.KubeconfigData, err = env.AddUser(user, groups...); err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	if err := os.WriteFile(c.Kubeconfig, c.KubeconfigData, 0o600); err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	if c.Client, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
		c.Stop(t)
		t.Fatal(err)
	}
	return c
}

// Stop stops the API server and etcd.
func (c *Cluster) Stop(t *testing.T) {
	if err := c.Env.Stop(); err != nil {
		t.Error(err)
	}
}
