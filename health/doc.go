// Package health is the single health model of an OpenMedModel. Assess reads
// an object (unstructured, as Argo CD, Flux and kubectl see it) and returns a
// status code and a fixed message. It imports only apimachinery and the API
// constants, so it can be embedded anywhere; the faces for Argo CD
// (health/argocd: gitops-engine types and the Lua script) and Flux
// (health/flux: kstatus-compatible CEL expressions) are sub-packages, proven
// to agree with Assess on one fixture corpus.
//
// The model follows kstatus: Ready, Reconciling and Stalled decide, the phase
// only picks the message (or decides for statuses written without the
// kstatus pair, such as the Python (Kopf) operator's this one replaces). Argo CD specifics: a
// rolled-back resource is Degraded (the declared spec is not what serves, as
// for an aborted Argo Rollout), a suspended one Suspended, and a Deployment
// that lost availability while the model was Ready is Degraded even though
// Flux keeps waiting for it to recover.
package health
