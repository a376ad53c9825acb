package v1alpha1

// Annotations, labels and names shared by the operator, its library and its
// health checks. Each is defined once here.
const (
	// ModelResourceAnnotation holds the owner key "<namespace>/<name>" of the
	// OpenMedModel on the target Deployment, its pod template and the manifest
	// ConfigMaps.
	ModelResourceAnnotation = "openmed.ai/model-resource"

	// ManifestHashAnnotation holds the manifest hash on the target's pod
	// template; changing it is what rolls the pods.
	ManifestHashAnnotation = "openmed.ai/model-manifest-hash"

	// RollbackToAnnotation requests a manual rollback to a retained version.
	RollbackToAnnotation = "openmed.ai/rollback-to"

	// ResetRequestAnnotation (helm-controller's convention) asks the operator to
	// clear a failed-spec block and try the desired spec again.
	ResetRequestAnnotation = "reconcile.fluxcd.io/resetAt"

	// BakeLabel is on the target's pod template (value "true") while the
	// model's spec bakes its versions (spec.rolloutStrategy.bakeSeconds): the
	// operator watches the pods that carry it, and no others (in a shard,
	// those that also carry the shard's labels, which the template carries
	// from the apply that rolled it).
	BakeLabel = "openmed.ai/bake"

	// ClaimedLabel is on the metadata of every Deployment the operator
	// writes (value "true"), never on its pod template: the operator's
	// Deployment cache selects on it, so a Deployment no model targets costs
	// it nothing. It goes with the operator's release, like the owner
	// annotation.
	ClaimedLabel = "openmed.ai/claimed"

	// ModelFamilyLabel carries the model family on manifest ConfigMaps.
	ModelFamilyLabel = "openmed.ai/model-family"

	// ManagedByLabel marks objects the operator created.
	ManagedByLabel = "app.kubernetes.io/managed-by"

	// ManagedByValue is the ManagedByLabel value.
	ManagedByValue = "openmed-operator"

	// Finalizer releases the target Deployment before the resource goes.
	Finalizer = "openmed.ai/finalizer"

	// PreloadEnvVar is the environment variable of the OpenMed service that
	// names the models to preload; it is also the ConfigMap key holding it.
	PreloadEnvVar = "OPENMED_SERVICE_PRELOAD_MODELS"

	// ManifestKey is the ConfigMap key holding the manifest JSON.
	ManifestKey = "manifest.json"
)
