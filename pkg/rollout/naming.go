package rollout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/openmed/openmed-operator/pkg/api/v1alpha1"
	"github.com/openmed/openmed-operator/pkg/validation"
)

// DigestPrefix starts every spec and manifest digest.
const DigestPrefix = "sha256:"

// Manifest kinds and the suffix of the default ConfigMap base name.
const (
	// ManifestAPIVersion is the apiVersion of the manifest document.
	ManifestAPIVersion = "openmed.ai/v1alpha1"
	// ManifestKind is the kind of the manifest document.
	ManifestKind = "OpenMedModelManifest"

	defaultBaseSuffix = "-model-manifest"
	// A hashed default base keeps 37 characters of the resource name (as
	// the Kopf operator did), so the result fits one 63-character DNS label.
	hashedBasePrefixLength = 37
	// A content-addressed name adds "-" and 20 hex characters (80 bits);
	// its hashed fallback keeps 42 characters of the base for the same 63
	// limit. A legacy name (LegacyManifestConfigMapName) added 10 and kept
	// 52.
	hashedNamePrefixLength = 42
	nameHashLength         = 20
	legacyNamePrefixLength = 52
	shortHashLength        = 10
)

var (
	dnsSubdomainRE = regexp.MustCompile(v1alpha1.DNSSubdomainPattern)
	dnsLabelRE     = regexp.MustCompile(v1alpha1.DNSLabelPattern)
)

// SpecError is returned by Normalize for a spec the API server would reject.
// Its message names fields and rules only, never the offending values, so it
// can be copied into a status condition.
type SpecError struct {
	// Message is the value-free description of every violation.
	Message string
}

// Error implements error.
func (e *SpecError) Error() string { return e.Message }

// ManifestModel is one model entry of the manifest.
type ManifestModel struct {
	// Family is the model family.
	Family string `json:"family"`
	// Tier is the model tier.
	Tier v1alpha1.Tier `json:"tier"`
	// Version is the model pointer.
	Version string `json:"version"`
}

// ManifestDocument is the content of the manifest.json ConfigMap key. Its
// fields are in alphabetical JSON order, so encoding/json emits the canonical
// form.
type ManifestDocument struct {
	// APIVersion is always ManifestAPIVersion.
	APIVersion string `json:"apiVersion"`
	// Kind is always ManifestKind.
	Kind string `json:"kind"`
	// Models are the models to preload; exactly one for a spec, none for the
	// empty manifest.
	Models []ManifestModel `json:"models"`
}

// Normalize validates obj (with its CRD defaults filled in on a copy) and
// returns the normalized spec: every default resolved, the form that is
// hashed and retained. A *SpecError is returned for an invalid spec.
func Normalize(obj *v1alpha1.OpenMedModel) (v1alpha1.NormalizedSpec, error) {
	if obj.Name == "" {
		return v1alpha1.NormalizedSpec{}, &SpecError{Message: "metadata.name: Required value"}
	}
	spec := obj.Spec.DeepCopy()
	spec.Default()
	if errs := validation.ValidateSpec(spec, field.NewPath("spec")); len(errs) > 0 {
		return v1alpha1.NormalizedSpec{}, &SpecError{Message: errs.ToAggregate().Error()}
	}
	rs := spec.RolloutStrategy
	n := v1alpha1.NormalizedSpec{
		Family:                spec.Family,
		ManifestConfigMapName: spec.ManifestConfigMapName,
		Replicas:              spec.Replicas,
		RolloutStrategy: v1alpha1.NormalizedRolloutStrategy{
			BakeSeconds:             ptr.Deref(rs.BakeSeconds, 0),
			MaxSurge:                *rs.MaxSurge,
			MaxUnavailable:          *rs.MaxUnavailable,
			ProgressDeadlineSeconds: *rs.ProgressDeadlineSeconds,
			RollbackOnFailure:       *rs.RollbackOnFailure,
			Type:                    rs.Type,
		},
		TargetRef: v1alpha1.NormalizedTargetReference{
			ContainerName: v1alpha1.DefaultContainerName,
			Name:          TargetName(obj),
		},
		Tier:    spec.Tier,
		Version: spec.Version,
	}
	if rs.WhenUnschedulable == v1alpha1.UnschedulableReplaceInPlace {
		n.RolloutStrategy.WhenUnschedulable = rs.WhenUnschedulable
		n.RolloutStrategy.UnschedulableSeconds = ptr.To(ptr.Deref(rs.UnschedulableSeconds, v1alpha1.DefaultUnschedulableSeconds))
		n.RolloutStrategy.MinAvailable = rs.MinAvailable
	}
	if spec.TargetRef != nil && spec.TargetRef.ContainerName != "" {
		n.TargetRef.ContainerName = spec.TargetRef.ContainerName
	}
	if n.ManifestConfigMapName == "" {
		n.ManifestConfigMapName = DefaultConfigMapBase(obj.Name)
	}
	return n, nil
}

// TargetName is the Deployment obj targets: spec.targetRef.name, or the
// resource name. It needs no valid spec, so deletion can always find it.
func TargetName(obj *v1alpha1.OpenMedModel) string {
	if obj.Spec.TargetRef != nil && obj.Spec.TargetRef.Name != "" {
		return obj.Spec.TargetRef.Name
	}
	return obj.Name
}

// TargetNames returns the Deployments a reconciler must read for obj: the
// desired target (Observed.Deployment) and every other Deployment the
// resource may have written and not yet seen released (ClaimedTargets),
// sorted (Observed.PreviousTargets); previous is empty otherwise.
func TargetNames(obj *v1alpha1.OpenMedModel) (desired string, previous []string) {
	desired = TargetName(obj)
	for _, name := range ClaimedTargets(&obj.Status) {
		if name != desired {
			previous = append(previous, name)
		}
	}
	return desired, previous
}

// ClaimedTargets are the Deployments st records as possibly written by the
// operator: status.claimedTargets and status.targetName (a status written
// before claimedTargets existed names its one target there), sorted,
// without repeats.
func ClaimedTargets(st *v1alpha1.OpenMedModelStatus) []string {
	out := make([]string, 0, len(st.ClaimedTargets)+1)
	for _, name := range append(slices.Clone(st.ClaimedTargets), st.TargetName) {
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// OwnerKey is the "<namespace>/<name>" value of the openmed.ai/model-resource
// annotation that marks what obj owns. An empty namespace reads as default.
func OwnerKey(obj *v1alpha1.OpenMedModel) string {
	ns := obj.Namespace
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + obj.Name
}

// ParseOwnerKey splits an owner key ("<namespace>/<name>", OwnerKey) into
// the namespace and name of an OpenMedModel, and reports false for any
// value that cannot name one: a namespace that is no DNS label, a name that
// is no DNS subdomain (both within their lengths). The operator's stores
// keep an owner annotation only when it parses: anyone may write any value
// into an annotation, up to its 256 KiB.
func ParseOwnerKey(key string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(key, "/")
	if !ok || len(namespace) > v1alpha1.MaxDNSLabelLength || !dnsLabelRE.MatchString(namespace) || !validName(name) {
		return "", "", false
	}
	return namespace, name, true
}

// IsDigest reports whether s is a digest as Digest writes it: "sha256:" and
// 64 lowercase hex characters. A manifest hash annotation of any other
// shape was not written by the operator.
func IsDigest(s string) bool {
	if len(s) != len(DigestPrefix)+2*sha256.Size || !strings.HasPrefix(s, DigestPrefix) {
		return false
	}
	for _, c := range s[len(DigestPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// CanonicalJSON encodes v as canonical JSON: sorted keys (the API types
// declare their fields in alphabetical order), no whitespace.
func CanonicalJSON(v any) ([]byte, error) {
	return json.Marshal(v)
}

// Digest is "sha256:" and the lowercase hex SHA-256 of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	var out [len(DigestPrefix) + 2*sha256.Size]byte
	copy(out[:], DigestPrefix)
	hex.Encode(out[len(DigestPrefix):], sum[:])
	return string(out[:])
}

// canonicalBuffers hold the canonical JSON a digest is taken of: a pass
// takes several spec hashes, and only the digest outlives the call.
var canonicalBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// canonicalDigest is Digest(mustCanonical(v)) without keeping the JSON.
func canonicalDigest(v any) string {
	buf := canonicalBuffers.Get().(*bytes.Buffer)
	defer canonicalBuffers.Put(buf)
	buf.Reset()
	// An Encoder writes what Marshal returns, and a newline.
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		panic(fmt.Sprintf("canonical JSON of %T: %v", v, err))
	}
	return Digest(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

// SpecHash is the digest of the canonical JSON of a normalized spec: the
// desired, applied and failed spec hashes of the status.
func SpecHash(spec v1alpha1.NormalizedSpec) string {
	return canonicalDigest(&spec)
}

// Manifest is the manifest document of a normalized spec: its one model.
func Manifest(spec v1alpha1.NormalizedSpec) ManifestDocument {
	return ManifestDocument{
		APIVersion: ManifestAPIVersion,
		Kind:       ManifestKind,
		Models:     []ManifestModel{{Family: spec.Family, Tier: spec.Tier, Version: spec.Version}},
	}
}

// EmptyManifest is the manifest with no models.
func EmptyManifest() ManifestDocument {
	return ManifestDocument{APIVersion: ManifestAPIVersion, Kind: ManifestKind, Models: []ManifestModel{}}
}

// ManifestJSON is the canonical JSON of the manifest of spec.
func ManifestJSON(spec v1alpha1.NormalizedSpec) []byte {
	return mustCanonical(Manifest(spec))
}

// ManifestHash is the digest of the manifest of spec. It changes only with
// the family, tier or version; it is what rolls the pods.
func ManifestHash(spec v1alpha1.NormalizedSpec) string {
	m := Manifest(spec)
	return canonicalDigest(&m)
}

// DefaultConfigMapBase is the manifest ConfigMap base name for a resource
// named name when spec.manifestConfigMapName is not set: "<name>-model-manifest"
// when that is a DNS subdomain with labels of at most 63 characters, else a
// shortened, hashed form of at most 63 characters.
func DefaultConfigMapBase(name string) string {
	candidate := name + defaultBaseSuffix
	if validName(candidate) {
		return candidate
	}
	prefix := strings.ReplaceAll(name, ".", "-")
	if len(prefix) > hashedBasePrefixLength {
		prefix = prefix[:hashedBasePrefixLength]
	}
	prefix = strings.TrimRight(prefix, "-")
	return prefix + defaultBaseSuffix + "-" + shortDigest([]byte(candidate))
}

// ManifestConfigMapName is the content-addressed name of the manifest
// ConfigMap for a base name and a manifest hash: "<base>-<first 20 hex of
// the hash>". When that is not a DNS subdomain with labels of at most 63
// characters, the name is the base shortened to 42 characters (dots made
// dashes) and the first 20 hex characters of the digest of the long name,
// which still differs for every manifest. Twenty hex characters are 80
// bits: finding a second manifest of the same name costs about 2^40
// digests, where the 10 of a legacy name cost about a million.
func ManifestConfigMapName(base, manifestHash string) string {
	return contentName(base, manifestHash, nameHashLength, hashedNamePrefixLength)
}

// LegacyManifestConfigMapName is the name the operator gave the manifest
// ConfigMap of base and manifestHash before ManifestConfigMapName's
// suffix grew: "<base>-<first 10 hex of the hash>" (the hashed fallback
// keeps 52 characters of the base and 10 of the digest). A target that
// points at such a ConfigMap, or a retained version whose ConfigMap has
// such a name, keeps it: changing the name would roll the pods.
func LegacyManifestConfigMapName(base, manifestHash string) string {
	return contentName(base, manifestHash, shortHashLength, legacyNamePrefixLength)
}

// contentName is "<base>-<first hexLen hex of manifestHash>", or, when that
// is no DNS subdomain with labels of at most 63 characters, the base cut to
// prefixLen characters and the first hexLen hex characters of the digest
// of the long name.
func contentName(base, manifestHash string, hexLen, prefixLen int) string {
	hexHash := strings.TrimPrefix(manifestHash, DigestPrefix)
	if len(hexHash) > hexLen {
		hexHash = hexHash[:hexLen]
	}
	candidate := base + "-" + hexHash
	if validName(candidate) {
		return candidate
	}
	prefix := strings.ReplaceAll(base, ".", "-")
	if len(prefix) > prefixLen {
		prefix = prefix[:prefixLen]
	}
	prefix = strings.Trim(prefix, "-")
	sum := sha256.Sum256([]byte(candidate))
	digest := hex.EncodeToString(sum[:])[:hexLen]
	if prefix == "" {
		return "manifest-" + digest
	}
	return prefix + "-" + digest
}

// validName is the name rule of the Python (Kopf) operator this one
// replaces: a DNS subdomain of at most 253
// characters whose labels have at most 63.
func validName(s string) bool {
	return len(s) <= v1alpha1.MaxDNSSubdomainLength && dnsSubdomainRE.MatchString(s)
}

func shortDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:shortHashLength]
}

// mustCanonical encodes values built only from strings, integers, booleans
// and int-or-strings; encoding/json cannot fail on them.
func mustCanonical(v any) []byte {
	b, err := CanonicalJSON(v)
	if err != nil {
		panic(fmt.Sprintf("canonical JSON of %T: %v", v, err))
	}
	return b
}
